package drive

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/internal/testsock"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// Before: the doubt a settling sets while the target does not answer is
// never cleared once the target does answer. The target here answers that
// it has no copy (Stopped); applying that here fails once (libvirt here
// still restarting), and in that window an operator's `resolve --keep
// target` is still taken: applyOperatorsWord destroys this node's copy,
// the only one there is.
func TestAKeepTargetAfterTheTargetSpokeNeverDestroysTheOnlyCopy(t *testing.T) {
	defer func(w time.Duration) { applyFirstWait = w }(applyFirstWait)
	applyFirstWait = 3 * time.Second

	addr := nowhere(t)
	f, c, r := settleGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedMigration), addr, 0)
	var restarting atomic.Bool
	s := sourceWith(t, connsFunc(func(string) (*libvirtx.Conn, error) {
		if restarting.Load() {
			return nil, errors.New("libvirtd restarting")
		}
		return c, nil
	}))
	// The target is unreachable: the settling shows in doubt.
	done := settlingInDoubt(t, s, r)

	// libvirt here restarts, and the target comes back: its copy is gone.
	restarting.Store(true)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skip("port taken meanwhile:", err)
	}
	t.Cleanup(func() { ln.Close() })
	var asked atomic.Int32
	go testsock.Accept(ln, func(c net.Conn) {
		var req peer.ControlRequest
		if _, err := peer.ReadHeader(c); err != nil || json.NewDecoder(c).Decode(&req) != nil {
			return
		}
		asked.Add(1)
		json.NewEncoder(c).Encode(peer.ControlResponse{Outcome: peer.OutcomeStopped})
	})
	deadline := time.Now().Add(10 * time.Second)
	for asked.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if asked.Load() == 0 {
		t.Fatal("the target was never asked")
	}
	time.Sleep(300 * time.Millisecond) // in applyUntilDone's first wait now

	// The operator's late word, given while the target has already said
	// its copy is gone.
	accepted := s.Resolve(r.Socket, r.Domain, peer.OutcomeRunning)
	restarting.Store(false)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("not settled")
	}
	destroys := len(f.Calls(libvirtxDomainDestroy))
	resumes := len(f.Calls(libvirtxDomainResume))
	t.Logf("resolve accepted=%v destroys=%d resumes=%d", accepted, destroys, resumes)
	if accepted && destroys > 0 {
		t.Errorf("the target said its copy is gone (Stopped), yet a stale in-doubt mark took `resolve --keep target` and destroyed this node's copy, the only one (%d destroys, %d resumes)", destroys, resumes)
	}
}

// Before: keep-source's tellTargetKept runs beside the resume it is meant
// to follow. When the target answers (it runs the guest) before this
// node's copy is resumed, pauseSecondCopy's DomainSuspend finds the copy
// still paused by the migration, which libvirt takes as a no-op success
// (qemuDomainSuspend: state == PAUSED, nothing stopped); the resume then
// runs it: two copies run while the log says this one is paused.
func TestKeepSourcePausesTheCopyOnlyAfterItsResume(t *testing.T) {
	var said atomic.Bool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go testsock.Accept(ln, func(c net.Conn) {
		var req peer.ControlRequest
		if _, err := peer.ReadHeader(c); err != nil || json.NewDecoder(c).Decode(&req) != nil {
			return
		}
		if !said.Load() {
			json.NewEncoder(c).Encode(peer.ControlResponse{Error: "not settled yet", Reason: "unsettled"})
			return
		}
		json.NewEncoder(c).Encode(peer.ControlResponse{Outcome: peer.OutcomeRunning})
	})
	f, c, r := settleGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedMigration), ln.Addr().String(), 0)
	const procSuspend, procJobStats = 34, 298
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case procJobStats:
			// libvirt ending the job Confirm left: a moment.
			time.Sleep(300 * time.Millisecond)
			return nil, nil, false
		case procSuspend:
			st, _, _ := c.DomainState(context.Background(), libvirt.Domain{Name: "vm", UUID: libvirt.UUID{7}})
			if st == libvirtx.StateRunning {
				f.SetState("vm", int32(libvirtx.StatePaused), int32(libvirt.DomainPausedUser))
			}
			return nil, nil, true
		case libvirtxDomainResume:
			f.SetState("vm", int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused))
			return nil, nil, true
		}
		return nil, nil, false
	})
	s := testSource(t, map[string]*libvirtx.Conn{r.Socket: c}, 0)
	done := settlingInDoubt(t, s, r)
	// The target's answer is on its way as the operator keeps the source.
	said.Store(true)
	if !s.Resolve(r.Socket, r.Domain, peer.OutcomeStopped) {
		t.Fatal("resolve not taken")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not settled")
	}
	waitFor(t, "the pause of the second copy", func() bool { return len(f.Calls(procSuspend)) > 0 })
	time.Sleep(500 * time.Millisecond)
	st, rs, err := c.DomainState(context.Background(), libvirt.Domain{Name: "vm", UUID: libvirt.UUID{7}})
	t.Logf("suspends=%d resumes=%d final state=%v reason=%d err=%v", len(f.Calls(procSuspend)), len(f.Calls(libvirtxDomainResume)), st, rs, err)
	if st == libvirtx.StateRunning {
		t.Errorf("the target runs the guest and so does this node: pauseSecondCopy's suspend landed before the resume and did nothing")
	}
}

// settlingInDoubt settles r's record in the background, its key held as
// its caller holds it, and returns once the settling shows in doubt.
func settlingInDoubt(t *testing.T, s *Source, r drivenRecord) <-chan struct{} {
	t.Helper()
	if err := s.recordDrive(r); err != nil {
		t.Fatal(err)
	}
	key := driveKey(r.Socket, r.Domain)
	s.running.start(key)
	done := settling(s, r.ID)
	waitFor(t, "the settling in doubt", func() bool { return s.running.inDoubt(key) })
	return done
}
