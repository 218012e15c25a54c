package drive

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/peer"
)

// libvirtxDomainSuspend is libvirt's REMOTE_PROC_DOMAIN_SUSPEND;
// qemuMonitorCommand is QEMU_PROC_DOMAIN_MONITOR_COMMAND.
const (
	libvirtxDomainSuspend = 34
	qemuMonitorCommand    = 1
)

// suspendable is a fake libvirt holding one guest in state/reason, whose
// Suspend pauses it as libvirt does during an outgoing post-copy's job
// (qemuProcessHandleStop: paused, post-copy), whose Destroy stops it, and
// whose Resume libvirt refuses (the migration's job shuts it out), while
// QEMU's cont, passed through, runs it.
func suspendable(t *testing.T, state, reason int32) (*libvirtxtest.Server, *libvirtx.Conn, libvirt.Domain) {
	t.Helper()
	f, c, _ := handoverGuest(t, state, reason)
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case libvirtxDomainSuspend:
			f.SetState("vm", int32(libvirtx.StatePaused), libvirtx.PausedPostCopy)
		case libvirtxDomainDestroy:
			f.SetState("vm", int32(libvirtx.StateShutoff), int32(libvirt.DomainShutoffDestroyed))
		case libvirtxDomainResume:
			return nil, &libvirt.Error{Code: 68, Message: "Timed out during operation: cannot acquire state change lock (held by monitor=remoteDispatchDomainMigrateConfirm3Params)"}, true
		default:
			return nil, nil, false
		}
		return nil, nil, true
	})
	f.AnswerQEMU(func(proc uint32, args []byte) ([]byte, *libvirt.Error, bool) {
		if proc == qemuMonitorCommand && bytes.Contains(args, []byte(`"cont"`)) {
			f.SetState("vm", int32(libvirtx.StateRunning), libvirtx.RunningPostCopy)
			return new(libvirtxtest.XDR).String(`{"return":{}}`).Bytes(), nil, true
		}
		return nil, nil, false
	})
	dom, err := c.LookupDomain(context.Background(), "vm")
	if err != nil {
		t.Fatal(err)
	}
	return f, c, dom
}

// After the switch to post-copy, a source's copy that runs again is
// paused, whatever reason libvirt gives; before it, a copy libvirt
// resumed after a cancelled pre-copy is left running, as it must be.
func TestTheGuardPausesOnlyACopyThatRunsAfterTheSwitch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seen    [][2]int32 // states the guard reads, in order
		suspend bool
	}{
		{"resumed after a cancelled pre-copy", [][2]int32{{int32(libvirtx.StatePaused), libvirtx.PausedMigration}, {int32(libvirtx.StateRunning), int32(libvirt.DomainRunningMigrationCanceled)}}, false},
		{"running in post-copy at first sight", [][2]int32{{int32(libvirtx.StateRunning), libvirtx.RunningPostCopy}}, true},
		{"switched, then unpaused", [][2]int32{{int32(libvirtx.StatePaused), libvirtx.PausedPostCopy}, {int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused)}}, true},
		{"switched, then restored by a cancelled Confirm", [][2]int32{{int32(libvirtx.StatePaused), libvirtx.PausedPostCopyFailed}, {int32(libvirtx.StateRunning), int32(libvirt.DomainRunningMigrationCanceled)}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := tc.seen[0]
			f, c, dom := suspendable(t, first[0], first[1])
			g := &staleCopyGuard{log: zap.NewNop(), conn: c, dom: dom}
			for _, st := range tc.seen {
				f.SetState("vm", st[0], st[1])
				g.look(context.Background())
			}
			if got := len(f.Calls(libvirtxDomainSuspend)) > 0; got != tc.suspend || g.pausedAny() != tc.suspend {
				t.Fatalf("suspended %v (guard says %v), want %v", got, g.pausedAny(), tc.suspend)
			}
		})
	}
}

// libvirt's event wakes the guard at once: the copy is paused well within
// the guard's poll, which is only for a lost subscription.
func TestTheGuardPausesOnLibvirtsEventWithoutWaitingForItsPoll(t *testing.T) {
	f, c, dom := suspendable(t, int32(libvirtx.StatePaused), libvirtx.PausedPostCopy)
	g := guardStaleCopy(zap.NewNop(), c, dom)
	defer g.end()
	// The guard's first look sees the switch.
	time.Sleep(staleCopyPoll + 100*time.Millisecond)
	f.SetState("vm", int32(libvirtx.StateRunning), libvirtx.RunningPostCopy)
	sent := time.Now()
	f.Lifecycle("vm", int32(libvirt.DomainEventResumed), 0)
	for !g.pausedAny() {
		if time.Since(sent) > staleCopyPoll/2 {
			t.Fatalf("not paused %v after libvirt's resumed event", time.Since(sent))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("paused %v after libvirt's event", time.Since(sent).Round(time.Millisecond))
}

// With no word from the target (its answer lost with the stream), a copy
// the guard paused is not settled: its record keeps the cause, and the
// record's settling then ends it (the target runs the guest) or runs it
// (the target's copy never ran), as for a copy the migration paused.
func TestACopyTheGuardPausedWaitsForTheTargetsWordInItsRecord(t *testing.T) {
	for _, tc := range []struct {
		outcome string
		then    libvirtx.State
	}{
		{peer.OutcomeRunning, libvirtx.StateShutoff},
		{peer.OutcomeStopped, libvirtx.StateRunning},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			f, c, dom := suspendable(t, int32(libvirtx.StatePaused), libvirtx.PausedPostCopy)
			g := &staleCopyGuard{log: zap.NewNop(), conn: c, dom: dom, stop: make(chan struct{}), done: make(chan struct{})}
			close(g.done)
			g.look(context.Background())
			f.SetState("vm", int32(libvirtx.StateRunning), libvirtx.RunningPostCopy)
			g.look(context.Background())
			s := &Source{cfg: SourceConfig{StateDir: t.TempDir()}, log: zap.NewNop()}
			rec := drivenRecord{ID: "m-0000000000000001", Domain: "vm", UUID: libvirtx.UUIDString(dom.UUID), Socket: c.Socket()}
			d := &driving{s: s, conn: c, dom: dom, log: zap.NewNop(), guard: g, rec: rec}
			if d.settleStaleCopy(settledOutcome(peer.ControlResponse{}, errors.New("read tcp: i/o timeout"))) {
				t.Fatal("a paused copy with no word from the target was called settled")
			}
			saved, ok := s.recordedDrive(rec.ID)
			if !ok || !saved.StalePaused {
				t.Fatalf("the record does not say the guard paused the copy: %+v (found %v)", saved, ok)
			}
			if _, err := applyOutcome(context.Background(), c, saved, tc.outcome); err != nil {
				t.Fatal(err)
			}
			if st, _, _ := c.DomainState(context.Background(), dom); st != tc.then {
				t.Fatalf("the target's word %q left this node's copy %v, want %v", tc.outcome, st, tc.then)
			}
		})
	}
}

// A copy QEMU started again after the switch, which no guard paused (a
// ferryd restarted meanwhile), goes once the target says it runs the
// guest, as the Confirm would have taken it.
func TestACopyQEMUStartedAgainAfterTheSwitchGoesOnTheTargetsWord(t *testing.T) {
	f, c, r := handoverGuest(t, int32(libvirtx.StateRunning), libvirtx.RunningPostCopy)
	if _, err := applyOutcome(context.Background(), c, r, peer.OutcomeRunning); err != nil || len(f.Calls(libvirtxDomainDestroy)) != 1 {
		t.Fatalf("applyOutcome: %v; destroy calls %d, want one", err, len(f.Calls(libvirtxDomainDestroy)))
	}
}

// libvirt's suspended/post-copy event arms the guard even when QEMU has
// started the copy again before the guard reads its state, and an older
// libvirt shows it running/unpaused, nothing in the state saying post-copy.
func TestTheSwitchEventArmsTheGuardWhenTheStateNoLongerShowsIt(t *testing.T) {
	f, c, dom := suspendable(t, int32(libvirtx.StateRunning), int32(libvirt.DomainRunningBooted))
	g := guardStaleCopy(zap.NewNop(), c, dom)
	defer g.end()
	time.Sleep(100 * time.Millisecond)
	f.SetState("vm", int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused))
	f.Lifecycle("vm", int32(libvirt.DomainEventSuspended), int32(libvirt.DomainEventSuspendedPostcopy))
	for deadline := time.Now().Add(staleCopyPoll / 2); !g.pausedAny(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the copy running after libvirt's switch event was not paused")
		}
	}
}
