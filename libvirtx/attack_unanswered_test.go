package libvirtx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// pingsOnly is a pod's libvirt that opens connections, answers keepalive
// PINGs, so that each connection looks alive, and the procedures in
// answered, and never any other call.
func pingsOnly(t *testing.T, path string, answered ...uint32) *libvirtxtest.Server {
	f := libvirtxtest.New(t, path)
	answered = append(answered, libvirtxtest.ProcConnectOpen, libvirtxtest.ProcAuthList, libvirtxtest.ProcConnectSupportsFeature)
	f.Ignore(func(proc uint32) bool {
		for _, a := range answered {
			if proc == a {
				return false
			}
		}
		return true
	})
	return f
}

// goroutinesSettle waits until no more than limit goroutines run, and
// says how many do then.
func goroutinesSettle(limit int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(3 * time.Second); n > limit && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// dialShortCalls connects as to a launcher, with time to spare, then
// gives each call 20ms.
func dialShortCalls(t *testing.T, f *libvirtxtest.Server, on OnSilence) *Conn {
	c, err := dial(context.Background(), f.Path(), 5*time.Second, filepath.Dir(f.Path()), quick, on)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.timeout = 20 * time.Millisecond
	return c
}

const unansweredCalls = 200

// callUnanswered makes unansweredCalls calls, one after another, each of
// which times out on a daemon that never answers.
func callUnanswered(c *Conn) (lastErr error) {
	for range unansweredCalls {
		_, lastErr = c.Domains(context.Background())
	}
	return lastErr
}

// Every call given up on held a goroutine waiting for go-libvirt's answer
// for as long as the connection lived: a pod's libvirt that answers only
// keepalive had ferryd's goroutines grow by one per call, without end.
// The pool's kind of connection is cut instead, which ends them all.
func TestAttackUnansweredCallsLeakNoGoroutines(t *testing.T) {
	f := pingsOnly(t, filepath.Join(t.TempDir(), "virtqemud-sock"))
	c := dialShortCalls(t, f, CutOnSilence)
	before := runtime.NumGoroutine()
	lastErr := callUnanswered(c)
	if after := goroutinesSettle(before + 10); after > before+10 {
		t.Fatalf("%d goroutines before %d unanswered calls, %d after: each call left one behind", before, unansweredCalls, after)
	}
	// go-libvirt closes Done from its reader, once the cut socket's read
	// fails: soon after the cut, not at it.
	select {
	case <-c.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a connection on which no call is answered was not cut")
	}
	if !errors.Is(lastErr, ErrUnanswered) || !errors.Is(lastErr, ErrTimeout) || !strings.Contains(lastErr.Error(), f.Path()) {
		t.Fatalf("a call after the cut: %v; want ErrUnanswered, naming the socket", lastErr)
	}
	if n := len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats)); n > maxUnanswered {
		t.Errorf("%d calls reached the daemon; the connection was to be cut after %d", n, maxUnanswered)
	}
}

// A connection libvirt ties a migration's state to is never cut (see
// OnSilence): it takes no new call while maxUnanswered are left waiting,
// and takes calls again once one of them is answered.
func TestAttackUnansweredCallsOnAConnectionNeverCut(t *testing.T) {
	f := libvirtxtest.New(t, filepath.Join(t.TempDir(), "virtqemud-sock"))
	gate := make(chan struct{})
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcConnectGetAllDomainStats {
			<-gate
		}
		return nil, nil, false
	})
	c := dialShortCalls(t, f, ReportSilence)
	before := runtime.NumGoroutine()
	lastErr := callUnanswered(c)
	// Each call that reached the fake holds a goroutine of the fake's too.
	if after := goroutinesSettle(before + 2*maxUnanswered + 5); after > before+2*maxUnanswered+5 {
		t.Fatalf("%d goroutines before %d unanswered calls, %d after: each call left one behind", before, unansweredCalls, after)
	}
	select {
	case <-c.Done():
		t.Fatal("a connection that only reports silence was cut")
	default:
	}
	if !errors.Is(lastErr, ErrUnanswered) {
		t.Fatalf("a call while %d wait: %v; want ErrUnanswered", maxUnanswered, lastErr)
	}
	if n := len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats)); n != maxUnanswered {
		t.Errorf("%d calls reached the daemon, want %d", n, maxUnanswered)
	}
	close(gate) // answered, late
	c.timeout = 5 * time.Second
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Ping(context.Background())
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnanswered) || time.Now().After(deadline) {
			t.Fatalf("a call once the calls waited on were answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pollingHandler calls as the tracker does, a listing after another,
// for as long as it is served.
type pollingHandler struct {
	served chan struct{}
	lost   chan error
}

func (h *pollingHandler) Serve(ctx context.Context, c *Conn, _ <-chan Event) {
	h.served <- struct{}{}
	for ctx.Err() == nil {
		c.Domains(ctx)
	}
}

func (h *pollingHandler) Lost(_ string, err error) { h.lost <- err }

// Through the pool: a pod's libvirt that answers the pool's pings, so its
// health check passes, and keepalive, and nothing else, is cut, logged
// and reconnected as after any loss, and its goroutines do not pile up.
func TestAttackThePoolCutsALibvirtThatAnswersOnlyPings(t *testing.T) {
	dir := t.TempDir()
	// And what it is asked as it is connected: its versions and abilities.
	f := pingsOnly(t, filepath.Join(dir, "virtqemud-sock"), libvirtxtest.ProcConnectGetLibVersion, libvirtxtest.ProcConnectDomainEventCallbackRegisterAny,
		libvirtxtest.ProcConnectGetVersion, libvirtxtest.ProcDomainAbortJobFlags)
	h := &pollingHandler{served: make(chan struct{}, 64), lost: make(chan error, 64)}
	core, logs := observer.New(zapcore.WarnLevel)
	before := runtime.NumGoroutine()
	p := NewPool(PoolConfig{Glob: filepath.Join(dir, "*-sock"), CallTimeout: 50 * time.Millisecond, PingEvery: 10 * time.Millisecond,
		KeepAlive: quick, BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond}, h, zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	var err error
	select {
	case err = <-h.lost:
	case <-time.After(5 * time.Second):
		t.Fatalf("a libvirt that answers only pings was never cut; status %+v", p.Status())
	}
	if !errors.Is(err, ErrUnanswered) {
		t.Fatalf("lost for %v; want ErrUnanswered", err)
	}
	// Served again and again: each connection is cut after maxUnanswered.
	for range 5 {
		select {
		case <-h.lost:
		case <-time.After(5 * time.Second):
			t.Fatal("the pool did not reconnect after the cut")
		}
	}
	logged := logs.FilterMessage("libvirt connection lost").All()
	if len(logged) == 0 || !strings.Contains(fmt.Sprint(logged[0].ContextMap()["error"]), "unanswered") {
		t.Errorf("the cut was not logged with its reason: %+v", logged)
	}
	if n := runtime.NumGoroutine(); n > before+50 {
		t.Fatalf("%d goroutines before, %d after %d connections of unanswered calls", before, n, f.Connections())
	}
}

// The node's own libvirtd, which the pool also watches, is never cut for
// calls it answers late: a fresh connection would only pin more of its
// workers to what hangs, and a call needing a job on a domain in an
// incoming migration waits out libvirt's job timeout on a healthy host.
func TestUnansweredCallsNeverCutTheNodesOwnLibvirt(t *testing.T) {
	f := pingsOnly(t, filepath.Join(t.TempDir(), "libvirt-sock"))
	c, err := dial(context.Background(), f.Path(), 5*time.Second, "", quick, CutOnSilence)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.timeout = 20 * time.Millisecond
	if err := callUnanswered(c); !errors.Is(err, ErrUnanswered) {
		t.Fatalf("a call while %d wait: %v; want ErrUnanswered", maxUnanswered, err)
	}
	select {
	case <-c.Done():
		t.Fatal("the node's own libvirt was cut for calls it had not answered yet")
	case <-time.After(200 * time.Millisecond):
	}
}

// The daemon's process is the one the kernel says is at the other end.
func TestDaemonPIDIsThePeersProcess(t *testing.T) {
	f := libvirtxtest.New(t, filepath.Join(t.TempDir(), "libvirt-sock"))
	c, err := Dial(context.Background(), f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if pid, err := c.DaemonPID(); err != nil || pid != os.Getpid() {
		t.Errorf("daemon pid %d (%v), want this process's %d", pid, err, os.Getpid())
	}
}
