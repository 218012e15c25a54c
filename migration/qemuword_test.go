package migration

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// A source in post-copy that libvirt reports failed, with QEMU asked.
func unconfirmedPostCopy(t *testing.T) *feed {
	f := newFeed(t, "a")
	f.tr.cfg.VerifyPostCopyFailure = true
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	acts := f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	if !hasAction(acts, askQEMU) {
		t.Fatalf("libvirt's word taken without asking QEMU: %+v", acts)
	}
	f.wantPhase(api.PhaseRunning)
	return f
}

func (f *feed) qemu(status string, err error) {
	f.tr.apply(input{kind: inQEMUStatus, socket: sock, dom: f.dom, at: f.tick(), got: f.now, qemu: status, err: err})
}

func TestAPostCopyFailureIsRecordedOnQEMUsWord(t *testing.T) {
	f := unconfirmedPostCopy(t)
	f.qemu(libvirtx.QEMUMigrationPostCopyPaused, nil)
	if j := f.wantPhase(api.PhasePostCopyFailed); !strings.Contains(j.FailureReason, "QEMU: postcopy-paused") {
		t.Fatalf("reason %q", j.FailureReason)
	}
	f.wantTotal(api.RoleSource, "postcopy_failed", 1)
}

func TestAPostCopyWhoseStreamGoesOnIsNotAFailure(t *testing.T) {
	f := unconfirmedPostCopy(t)
	f.qemu(libvirtx.QEMUMigrationPostCopyActive, nil)
	f.wantPhase(api.PhaseRunning)
	doms := f.tr.Domains()
	if len(doms) != 1 || doms[0].AttentionReason != "postcopy_unconfirmed" || !strings.Contains(doms[0].Attention, "stream goes on") {
		t.Fatalf("domain %+v, want postcopy_unconfirmed: no failure alert on libvirt's word alone", doms)
	}
	f.list(paused(libvirtx.PausedPostCopyFailed))
	f.wantPhase(api.PhaseRunning)
	// libvirt completes it by itself.
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	f.wantPhase(api.PhaseCompleted)
	f.wantTotal(api.RoleSource, "postcopy_failed", 0)
	f.wantTotal(api.RoleSource, "completed", 1)
}

func TestAQEMUThatCannotBeAskedLeavesLibvirtsWord(t *testing.T) {
	f := unconfirmedPostCopy(t)
	f.qemu("", errors.New("operation forbidden: read only access prevents virDomainQemuMonitorCommand"))
	if j := f.wantPhase(api.PhasePostCopyFailed); !strings.Contains(j.FailureReason, "could not be asked") {
		t.Fatalf("reason %q", j.FailureReason)
	}
}
