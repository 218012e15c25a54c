package drive

import (
	"context"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/peer"
)

// handoverGuest is a fake libvirt holding one guest in state/reason, and
// the record of its migration.
func handoverGuest(t *testing.T, state, reason int32) (*libvirtxtest.Server, *libvirtx.Conn, drivenRecord) {
	t.Helper()
	f := libvirtxtest.New(t, "")
	uuid := libvirt.UUID{7}
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: uuid, ID: 1, State: state, Reason: reason})
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == uint32(libvirtxDomainDestroy) {
			f.SetState("vm", int32(libvirtx.StateShutoff), int32(libvirt.DomainShutoffDestroyed))
			return nil, nil, true
		}
		return nil, nil, false
	})
	c, err := libvirtx.Dial(context.Background(), f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c, drivenRecord{ID: "m-0000000000000001", Domain: "vm", UUID: libvirtx.UUIDString(uuid)}
}

// libvirtxDomainDestroy is libvirt's REMOTE_PROC_DOMAIN_DESTROY.
const libvirtxDomainDestroy = 12

// libvirt resumes its copy by itself after a handover (a libvirtd stopped
// between the target's Finish and Confirm): the target runs the guest, so
// this stale copy goes, as Confirm would have taken it. A copy that runs
// for any other reason is never destroyed on the target's word alone.
func TestAStaleCopyLibvirtResumedAfterTheHandoverIsDestroyed(t *testing.T) {
	f, c, r := handoverGuest(t, int32(libvirtx.StateRunning), int32(libvirt.DomainRunningMigrationCanceled))
	what, err := applyOutcome(context.Background(), c, r, peer.OutcomeRunning)
	if err != nil || len(f.Calls(libvirtxDomainDestroy)) != 1 {
		t.Fatalf("applyOutcome: %q, %v; destroy calls %d, want one", what, err, len(f.Calls(libvirtxDomainDestroy)))
	}
	f2, c2, r2 := handoverGuest(t, int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused))
	if _, err := applyOutcome(context.Background(), c2, r2, peer.OutcomeRunning); err == nil || len(f2.Calls(libvirtxDomainDestroy)) != 0 {
		t.Fatalf("a copy resumed by someone was destroyed, or not left for an operator: %v", err)
	}
}

// A connection libvirt closed (its libvirtd stopped) has dropped the
// migration's job: the guest is never handed over on it.
func TestAJobIsHeldOnlyWhileItsConnectionIsOpen(t *testing.T) {
	f, c, _ := handoverGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedMigration))
	if err := jobStillHeld(c); err != nil {
		t.Fatalf("an open connection's job taken for dropped: %v", err)
	}
	f.Close()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the connection never saw libvirtd go")
	}
	if err := jobStillHeld(c); err == nil {
		t.Fatal("a closed connection's job taken for held")
	}
}
