package drive

import (
	"context"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// libvirtxDomainSuspend is libvirt's REMOTE_PROC_DOMAIN_SUSPEND.
const libvirtxDomainSuspend = 34

// suspendable is a fake libvirt holding one guest in state/reason, whose
// Suspend pauses it.
func suspendable(t *testing.T, state, reason int32) (*libvirtxtest.Server, *libvirtx.Conn, libvirt.Domain) {
	t.Helper()
	f, c, _ := handoverGuest(t, state, reason)
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxDomainSuspend {
			f.SetState("vm", int32(libvirtx.StatePaused), int32(libvirt.DomainPausedUser))
			return nil, nil, true
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
