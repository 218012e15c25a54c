package drive

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/peer"
)

// connsFunc is this node's pool of libvirt connections as a test has it
// answer, try after try.
type connsFunc func(socket string) (*libvirtx.Conn, error)

func (f connsFunc) Conn(socket string) (*libvirtx.Conn, error) { return f(socket) }

// applied runs applyUntilDone in the background; its result arrives on the
// channel returned.
func applied(ctx context.Context, s *Source, r drivenRecord, outcome string) <-chan [2]any {
	out := make(chan [2]any, 1)
	go func() {
		what, _, ok := s.applyUntilDone(ctx, zap.NewNop(), r, outcome)
		out <- [2]any{what, ok}
	}()
	return out
}

// The connection a try used can die with its libvirtd (a restart); the
// next try takes whichever the pool has then, and the word is applied
// there.
func TestApplyUntilDoneTriesAgainOnTheConnectionThatWorksThen(t *testing.T) {
	defer func(w time.Duration) { applyFirstWait = w }(applyFirstWait)
	applyFirstWait = 50 * time.Millisecond
	gone, dead, _ := handoverGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedMigration))
	gone.Close()
	<-dead.Done()
	f, c, r := handoverGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedMigration))
	r.Socket = f.Path()
	var tries atomic.Int32
	s := sourceWith(t, connsFunc(func(string) (*libvirtx.Conn, error) {
		if tries.Add(1) == 1 {
			return dead, nil
		}
		return c, nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	what, _, ok := s.applyUntilDone(ctx, zap.NewNop(), r, peer.OutcomeRunning)
	if !ok || tries.Load() != 2 {
		t.Fatalf("applyUntilDone = %q, %v after %d tries; want applied on the second", what, ok, tries.Load())
	}
	if n := len(f.Calls(libvirtxDomainDestroy)); n != 1 {
		t.Fatalf("the copy left paused here was destroyed %d times, want once", n)
	}
}

// A copy that runs here while the target says the guest runs there is no
// passing state: it is never destroyed on the target's word, but shown in
// doubt for an operator, whose word settles it: keep this node's copy (it
// runs on), or the target's (this one is destroyed).
func TestApplyUntilDoneLeavesARunningCopyToAnOperator(t *testing.T) {
	for _, keep := range []string{peer.OutcomeStopped, peer.OutcomeRunning} {
		f, c, r := handoverGuest(t, int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused))
		s := testSource(t, map[string]*libvirtx.Conn{r.Socket: c}, 0)
		key := driveKey(r.Socket, r.Domain)
		if !s.running.start(key) {
			t.Fatal("the domain's key is taken")
		}
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan [3]any, 1)
		go func() {
			what, stands, ok := s.applyUntilDone(ctx, zap.NewNop(), r, peer.OutcomeRunning)
			out <- [3]any{what, stands, ok}
		}()
		waitFor(t, "the migration shown in doubt", func() bool { return s.Resolve(r.Socket, r.Domain, keep) })
		var got [3]any
		select {
		case got = <-out:
		case <-time.After(5 * time.Second):
			t.Fatalf("keep %s: the operator's word did not settle it", keep)
		}
		cancel()
		destroys := len(f.Calls(libvirtxDomainDestroy))
		switch {
		case got[1] != keep || got[2] != true:
			t.Errorf("keep %s: applyUntilDone = %v; want the operator's outcome to stand", keep, got)
		case keep == peer.OutcomeStopped && destroys != 0:
			t.Errorf("keep source: this node's copy was destroyed %d times", destroys)
		case keep == peer.OutcomeRunning && destroys != 1:
			t.Errorf("keep target: this node's copy was destroyed %d times, want once", destroys)
		}
		s.running.end(key)
	}
}

// With no connection to libvirt, the tries go on until ctx ends, and
// end with it, not at the next try.
func TestApplyUntilDoneEndsWithItsContextBetweenTries(t *testing.T) {
	asked := make(chan struct{}, 1)
	s := sourceWith(t, connsFunc(func(string) (*libvirtx.Conn, error) {
		select {
		case asked <- struct{}{}:
		default:
		}
		return nil, errors.New("not connected")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := applied(ctx, s, drivenRecord{ID: "m-0000000000000001", Domain: "vm", Socket: "/run/libvirt/libvirt-sock"}, peer.OutcomeStopped)
	<-asked
	cancel()
	select {
	case got := <-done:
		if got[1] != false {
			t.Fatalf("applyUntilDone = %q, %v with no libvirt; want false", got[0], got[1])
		}
	case <-time.After(time.Second):
		t.Fatal("applyUntilDone went on after its context ended")
	}
}

// A libvirtd that never answers (hung) holds a try no longer than ctx:
// the try's own call is bounded by it, not only the pause after it.
func TestApplyUntilDoneEndsWithItsContextDuringAHungCall(t *testing.T) {
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: libvirt.UUID{7}, ID: 1, State: int32(libvirtx.StatePaused), Reason: int32(libvirt.DomainPausedMigration)})
	hung := make(chan struct{})
	entered := make(chan struct{}, 1)
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcDomainLookupByName {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-hung
		}
		return nil, nil, false
	})
	// A call timeout far past the test's wait: only ctx can end the call.
	c, err := libvirtx.Dial(context.Background(), f.Path(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Cleanup(func() { close(hung) })
	s := sourceWith(t, connsFunc(func(string) (*libvirtx.Conn, error) { return c, nil }))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := applied(ctx, s, drivenRecord{ID: "m-0000000000000001", Domain: "vm", UUID: libvirtx.UUIDString(libvirt.UUID{7}), Socket: f.Path()}, peer.OutcomeStopped)
	<-entered
	cancel()
	select {
	case got := <-done:
		if got[1] != false {
			t.Fatalf("applyUntilDone = %q, %v on a hung libvirtd; want false", got[0], got[1])
		}
	case <-time.After(2 * time.Second):
		t.Fatal("applyUntilDone waited on a hung libvirtd after its context ended")
	}
}

// sourceWith is a Source whose libvirt connections come from conns.
func sourceWith(t *testing.T, conns connsFunc) *Source {
	s := testSource(t, nil, 0)
	s.cfg.Conns = conns
	return s
}
