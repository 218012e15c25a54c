package daemon

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// How a fake launcher's libvirt treats a metadata call.
const (
	answers         = iota
	hangsTillCtx    // until the call's context ends, as libvirtx's calls do
	hangsRegardless // until the test lets it go: a call nothing can cancel
)

// fakeLaunchers are the libvirts of a node's launcher pods, by socket, and
// what was asked of them.
type fakeLaunchers struct {
	behaviour map[string]int
	release   chan struct{} // ends the calls that hang regardless

	mu       sync.Mutex
	calls    map[string]int
	inFlight map[string]int
	total    int // calls in flight, on all sockets
	peak     int // of total
	twice    int // calls started on a socket with one in flight
}

func newFakeLaunchers(behaviour map[string]int) *fakeLaunchers {
	return &fakeLaunchers{
		behaviour: behaviour,
		release:   make(chan struct{}),
		calls:     map[string]int{},
		inFlight:  map[string]int{},
	}
}

func (f *fakeLaunchers) read(ctx context.Context, socket, domain, uuid string) (string, error) {
	f.enter(socket)
	defer f.leave(socket)
	switch f.behaviour[socket] {
	case hangsTillCtx:
		<-ctx.Done()
		return "", ctx.Err()
	case hangsRegardless:
		<-f.release
		return "", errors.New("answered late")
	}
	return "vmi-" + uuid, nil
}

func (f *fakeLaunchers) enter(socket string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[socket]++
	if f.inFlight[socket] > 0 {
		f.twice++
	}
	f.inFlight[socket]++
	f.total++
	f.peak = max(f.peak, f.total)
}

func (f *fakeLaunchers) leave(socket string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight[socket]--
	f.total--
}

func (f *fakeLaunchers) callsOn(socket string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[socket]
}

func (f *fakeLaunchers) counts() (total, peak, twice int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total, f.peak, f.twice
}

// guests is a node's domains, which a test changes between rounds.
type guests struct {
	mu   sync.Mutex
	doms []api.Domain
}

func (g *guests) list() []api.Domain {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]api.Domain(nil), g.doms...)
}

func (g *guests) set(doms ...api.Domain) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.doms = doms
}

func guest(socket, name string) api.Domain {
	return api.Domain{Socket: socket, Name: "ns_" + name, Namespace: "ns", VMI: name, UUID: "uuid-" + name}
}

// settle waits in a bubble until no read is waited on, and then until the
// reads no longer waited on have done what they do on their way out.
func settle(u *vmiUIDs) {
	u.held.Wait()
	synctest.Wait()
}

func uidOf(u *vmiUIDs, d api.Domain) string { return u.get(d.Socket, d.Name, d.UUID) }

func startReader(u *vmiUIDs) (stop func(), stopped <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.run(ctx)
	}()
	return cancel, done
}

// A socket whose libvirt hangs delays no other socket's UID: the healthy
// one is read in the same round, at no time past it.
func TestVMIUIDsOfHealthySocketsDoNotWaitOnAHangingOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hanging, healthy := guest("/hostile", "bad"), guest("/launcher", "good")
		f := newFakeLaunchers(map[string]int{"/hostile": hangsTillCtx})
		u := newVMIUIDs((&guests{doms: []api.Domain{hanging, healthy}}).list, f.read)
		u.pace.limit = time.Hour // far past the round
		stop, stopped := startReader(u)
		defer func() { stop(); <-stopped }()
		time.Sleep(u.pace.every - time.Nanosecond)
		synctest.Wait()
		if got := uidOf(u, healthy); got != "vmi-uuid-good" {
			t.Errorf("healthy UID %q within a round of a hanging socket's read", got)
		}
	})
}

// No more reads are waited on at once than there are slots.
func TestVMIUIDsReadAtMostSlotsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &guests{}
		behaviour := map[string]int{}
		for i := range 3 * defaultUIDPace.slots {
			d := guest("/hostile"+string(rune('a'+i)), "vm"+string(rune('a'+i)))
			behaviour[d.Socket] = hangsTillCtx
			g.doms = append(g.doms, d)
		}
		f := newFakeLaunchers(behaviour)
		u := newVMIUIDs(g.list, f.read)
		u.pace.limit = time.Hour
		stop, stopped := startReader(u)
		defer func() { stop(); <-stopped }()
		time.Sleep(10 * u.pace.every)
		synctest.Wait()
		if _, peak, _ := f.counts(); peak != u.pace.slots {
			t.Errorf("%d reads in flight at once, want %d", peak, u.pace.slots)
		}
	})
}

// A socket with a read in flight, even one no longer waited on, is asked
// nothing more, for none of its domains, until that read returns.
func TestVMIUIDsAskABusySocketNothingMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &guests{}
		g.set(guest("/hostile", "a"), guest("/hostile", "b"), guest("/hostile", "c"))
		f := newFakeLaunchers(map[string]int{"/hostile": hangsRegardless})
		u := newVMIUIDs(g.list, f.read)
		ctx := context.Background()
		u.refresh(ctx, time.Now())
		time.Sleep(u.pace.limit)
		u.refresh(ctx, time.Now().Add(time.Hour)) // past any backoff
		synctest.Wait()
		if _, _, twice := f.counts(); twice != 0 || f.callsOn("/hostile") != 1 {
			t.Errorf("%d calls on a socket whose first has not returned, %d started while one was in flight", f.callsOn("/hostile"), twice)
		}
		close(f.release)
		synctest.Wait()
		u.refresh(ctx, time.Now().Add(time.Hour))
		settle(u)
		if n := f.callsOn("/hostile"); n != 2 {
			t.Errorf("%d calls once the first returned, want the next one", n)
		}
	})
}

// A read its context cannot end holds its socket, not its slot: once its
// deadline passes, the slot reads another socket.
func TestVMIUIDsStopWaitingOnAReadPastItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck, healthy := guest("/hostile", "bad"), guest("/launcher", "good")
		f := newFakeLaunchers(map[string]int{"/hostile": hangsRegardless})
		defer close(f.release)
		u := newVMIUIDs((&guests{doms: []api.Domain{stuck, healthy}}).list, f.read)
		u.pace.slots = 1
		ctx := context.Background()
		u.refresh(ctx, time.Now())
		time.Sleep(u.pace.limit)
		synctest.Wait()
		u.refresh(ctx, time.Now())
		synctest.Wait()
		if got := uidOf(u, healthy); got != "vmi-uuid-good" {
			t.Errorf("healthy UID %q: the only slot is still held by a read past its deadline", got)
		}
	})
}

// Sockets that timed out share only pace.suspects slots once their
// backoff has passed: however many there are, a healthy socket finds one.
func TestVMIUIDsSocketsThatTimedOutShareFewSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &guests{}
		behaviour := map[string]int{}
		for _, s := range []string{"/h1", "/h2", "/h3", "/h4"} {
			g.doms = append(g.doms, guest(s, "vm"+s[1:]))
			behaviour[s] = hangsTillCtx
		}
		f := newFakeLaunchers(behaviour)
		u := newVMIUIDs(g.list, f.read)
		u.pace.slots, u.pace.suspects = 4, 1
		ctx := context.Background()
		u.refresh(ctx, time.Now())
		settle(u) // each timed out once
		healthy := guest("/launcher", "good")
		g.set(append(g.list(), healthy)...)
		u.refresh(ctx, time.Now().Add(u.pace.retry))
		synctest.Wait()
		if got := uidOf(u, healthy); got != "vmi-uuid-good" {
			t.Errorf("healthy UID %q: sockets that timed out took every slot", got)
		}
		if total, _, _ := f.counts(); total != 1 {
			t.Errorf("%d sockets that timed out asked at once, want 1", total)
		}
		settle(u)
	})
}

// A socket whose read timed out is asked nothing, for any of its domains,
// until its backoff passes; the backoff doubles, and outlasts the socket
// listing no domain a while.
func TestVMIUIDsBackOffFromSocketsThatTimeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &guests{}
		f := newFakeLaunchers(map[string]int{"/hostile": hangsTillCtx})
		u := newVMIUIDs(g.list, f.read)
		ctx := context.Background()
		t0 := time.Now()
		round := func(at time.Duration, want int) {
			t.Helper()
			u.refresh(ctx, t0.Add(at))
			settle(u)
			if n := f.callsOn("/hostile"); n != want {
				t.Errorf("at %v: %d calls, want %d", at, n, want)
			}
		}
		retry := u.pace.retry
		g.set(guest("/hostile", "a"))
		round(0, 1)
		g.set() // hidden, as when its connection is cut
		round(2*time.Second, 1)
		g.set(guest("/hostile", "b")) // a new domain is no way around the backoff
		round(4*time.Second, 1)
		round(retry, 2)
		round(2*retry, 2) // doubled
		round(3*retry, 3)
	})
}

// What is known of domains and sockets gone is dropped: of a socket that
// timed out, once its backoff is long past; of one with a read in flight,
// once that returns.
func TestVMIUIDsForgetWhatIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &guests{}
		g.set(guest("/launcher", "good"), guest("/hangs", "slow"), guest("/stuck", "stuck"))
		f := newFakeLaunchers(map[string]int{"/hangs": hangsTillCtx, "/stuck": hangsRegardless})
		u := newVMIUIDs(g.list, f.read)
		ctx := context.Background()
		t0 := time.Now()
		u.refresh(ctx, t0)
		settle(u)
		g.set()
		u.refresh(ctx, t0.Add(u.pace.backoffMax+u.pace.retry))
		if n, s := u.remembered(); n != 0 || s != 1 {
			t.Errorf("with every guest gone, %d domains and %d sockets remembered, want only the busy one", n, s)
		}
		close(f.release)
		synctest.Wait()
		u.refresh(ctx, t0.Add(u.pace.backoffMax+u.pace.retry))
		if n, s := u.remembered(); n != 0 || s != 0 {
			t.Errorf("with every guest gone and no read in flight, %d domains and %d sockets remembered", n, s)
		}
	})
}

func (u *vmiUIDs) remembered() (domains, sockets int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.known), len(u.sockets)
}

// The reader returns as soon as its context ends, though reads are in
// flight, one of them one that nothing can cancel.
func TestVMIUIDsStopPromptlyWhenTheirContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &guests{doms: []api.Domain{guest("/hangs", "a"), guest("/stuck", "b")}}
		f := newFakeLaunchers(map[string]int{"/hangs": hangsTillCtx, "/stuck": hangsRegardless})
		defer close(f.release)
		u := newVMIUIDs(g.list, f.read)
		u.pace.every, u.pace.limit = time.Hour, time.Hour
		stop, stopped := startReader(u)
		synctest.Wait()
		start := time.Now()
		stop()
		synctest.Wait()
		select {
		case <-stopped:
		default:
			t.Fatal("the reader runs on after its context ended")
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("the reader took %v to stop", waited)
		}
	})
}

// No goroutine of a read outlives the read's deadline, nor any of the
// reader's its context; settled compares with the count before, as the
// goroutines end a moment after.
func TestVMIUIDsLeaveNoGoroutinePastTheDeadline(t *testing.T) {
	before := runtime.NumGoroutine()
	u, f := leakyNode()
	u.pace.limit = 50 * time.Millisecond
	stop, stopped := startReader(u)
	defer func() { stop(); <-stopped }()
	waitFor(t, "hanging reads in flight", func() bool { total, _, _ := f.counts(); return total > 0 })
	settled(t, before+1) // the reader itself
}

func TestVMIUIDsLeaveNoGoroutinePastTheirContext(t *testing.T) {
	before := runtime.NumGoroutine()
	u, f := leakyNode()
	u.pace.limit = time.Minute
	stop, stopped := startReader(u)
	waitFor(t, "every slot taken", func() bool { total, _, _ := f.counts(); return total == u.pace.slots })
	stop()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader did not stop")
	}
	settled(t, before)
}

// leakyNode is a node of healthy launchers and more hanging ones than
// there are slots, read every few milliseconds and retried only in an hour.
func leakyNode() (*vmiUIDs, *fakeLaunchers) {
	g := &guests{}
	behaviour := map[string]int{}
	for i := range 12 {
		s := "/launcher" + string(rune('a'+i))
		g.doms = append(g.doms, guest(s, "vm"+s[1:]))
		if i%4 != 0 {
			behaviour[s] = hangsTillCtx
		}
	}
	f := newFakeLaunchers(behaviour)
	u := newVMIUIDs(g.list, f.read)
	u.pace.every, u.pace.retry = 5*time.Millisecond, time.Hour
	return u, f
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("never: %s", what)
		}
	}
}

func settled(t *testing.T, want int) {
	t.Helper()
	n := runtime.NumGoroutine()
	for end := time.Now().Add(5 * time.Second); n > want && time.Now().Before(end); n = runtime.NumGoroutine() {
		time.Sleep(5 * time.Millisecond)
	}
	if n > want {
		t.Errorf("%d goroutines, want at most %d", n, want)
	}
}
