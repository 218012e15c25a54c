package libvirtx

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

type lostCall struct {
	socket string
	err    error
}

// recordingHandler serves until its connection ends and reports what the
// pool told it.
type recordingHandler struct {
	served chan string
	lost   chan lostCall
}

func (h *recordingHandler) Serve(ctx context.Context, c *Conn, events <-chan Event) {
	h.served <- c.Socket()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				return
			}
		}
	}
}

func (h *recordingHandler) Lost(socket string, err error) { h.lost <- lostCall{socket, err} }

func (h *recordingHandler) waitServed(t *testing.T, socket string) {
	t.Helper()
	select {
	case s := <-h.served:
		if s != socket {
			t.Fatalf("serving %s, want %s", s, socket)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never served", socket)
	}
}

func (h *recordingHandler) waitLost(t *testing.T, socket string) error {
	t.Helper()
	select {
	case l := <-h.lost:
		if l.socket != socket {
			t.Fatalf("lost %s (%v), want %s", l.socket, l.err, socket)
		}
		return l.err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never reported lost", socket)
	}
	return nil
}

func TestLostSaysWhetherTheSocketWentAway(t *testing.T) {
	dir := t.TempDir()
	_, h, stop := runPool(t, PoolConfig{Glob: filepath.Join(dir, "*.sock"), RescanEvery: 20 * time.Millisecond, CallTimeout: time.Second})

	gone := libvirtxtest.New(t, filepath.Join(dir, "launcher-a.sock"))
	h.waitServed(t, gone.Path())
	if err := os.Remove(gone.Path()); err != nil {
		t.Fatal(err)
	}
	if err := h.waitLost(t, gone.Path()); !errors.Is(err, ErrSocketGone) {
		t.Fatalf("socket removed: Lost got %v, want ErrSocketGone", err)
	}

	stays := libvirtxtest.New(t, filepath.Join(dir, "launcher-b.sock"))
	h.waitServed(t, stays.Path())
	stop()
	if err := h.waitLost(t, stays.Path()); errors.Is(err, ErrSocketGone) || !errors.Is(err, context.Canceled) {
		t.Fatalf("pool stopping: Lost got %v, want context.Canceled and not ErrSocketGone", err)
	}
}

// A launcher pod usually ends with its libvirt exiting first and its socket
// removed after: the handler must still hear that the socket is gone.
func TestLostSaysGoneWhenTheDaemonDiedFirst(t *testing.T) {
	dir := t.TempDir()
	h := newRecordingHandler()
	runPoolWith(t, fastRetries(dir), h)
	f := libvirtxtest.New(t, filepath.Join(dir, "launcher.sock"))
	h.waitServed(t, f.Path())
	f.Kill() // the daemon dies; its socket file stays until its pod goes
	if err := h.waitLost(t, f.Path()); errors.Is(err, ErrSocketGone) {
		t.Fatalf("daemon gone, socket still there: Lost got %v, want a lost connection", err)
	}
	if err := os.Remove(f.Path()); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := h.waitLost(t, f.Path()); !errors.Is(err, ErrSocketGone) {
		t.Fatalf("socket removed after its daemon died: Lost got %v, want ErrSocketGone", err)
	}
}

// A socket's jobs end for good when it is declared gone, so one scan that
// misses it is not enough.
func TestSocketGoneOnlyAfterTwoScansMissIt(t *testing.T) {
	dir := t.TempDir()
	h := &recordingHandler{served: make(chan string, 4), lost: make(chan lostCall, 4)}
	p := NewPool(PoolConfig{Glob: filepath.Join(dir, "*.sock"), CallTimeout: time.Second}, h, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		p.wg.Wait()
	}()
	f := libvirtxtest.New(t, filepath.Join(dir, "launcher.sock"))
	p.rescan(ctx)
	h.waitServed(t, f.Path())
	if err := os.Remove(f.Path()); err != nil {
		t.Fatal(err)
	}
	watched := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		_, ok := p.running[f.Path()]
		return ok
	}
	p.rescan(ctx)
	if !watched() {
		t.Fatal("one scan missing the socket declared it gone")
	}
	p.rescan(ctx)
	if watched() {
		t.Fatal("two scans missed the socket and it is still watched")
	}
}

// A glob match is dialed only if it is a unix socket itself: a pod must not
// be able to point ferryd elsewhere through a symlink.
func TestGlobMatchesMustBeSocketsNotSymlinks(t *testing.T) {
	dir := t.TempDir()
	elsewhere := libvirtxtest.New(t, filepath.Join(t.TempDir(), "host-sock"))
	if err := os.Symlink(elsewhere.Path(), filepath.Join(dir, "link.sock")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p, h, _ := runPool(t, PoolConfig{Glob: filepath.Join(dir, "*.sock"), RescanEvery: 20 * time.Millisecond, CallTimeout: time.Second})

	launcher := libvirtxtest.New(t, filepath.Join(dir, "real.sock"))
	h.waitServed(t, launcher.Path())
	deadline := time.Now().Add(5 * time.Second)
	for {
		refused := 0
		for _, s := range p.Status() {
			if s.Socket != launcher.Path() && !s.Up && strings.Contains(s.LastError, "not a unix socket") {
				refused++
			}
		}
		if refused == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %+v: want link.sock and file.sock refused", p.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := elsewhere.Connections(); n != 0 {
		t.Fatalf("the socket behind the symlink was dialed %d times", n)
	}
}

// runPool runs a pool with a recording handler until the test ends or stop
// is called (which waits for every connection to close).
func runPool(t *testing.T, cfg PoolConfig) (*Pool, *recordingHandler, func()) {
	h := newRecordingHandler()
	p, stop := runPoolWith(t, cfg, h)
	return p, h, stop
}

func newRecordingHandler() *recordingHandler {
	return &recordingHandler{served: make(chan string, 4), lost: make(chan lostCall, 4)}
}

// fastRetries has a pool retry within milliseconds.
func fastRetries(dir string) PoolConfig {
	return PoolConfig{Glob: filepath.Join(dir, "*.sock"), RescanEvery: 20 * time.Millisecond, CallTimeout: time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond}
}

// runPoolWith runs a pool serving h until the test ends or stop.
func runPoolWith(t *testing.T, cfg PoolConfig, h Handler) (*Pool, func()) {
	p := NewPool(cfg, h, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		p.Run(ctx)
		close(stopped)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-stopped
		})
	}
	t.Cleanup(stop)
	return p, stop
}

// blockingLost holds its first Lost until released, so that a test can
// remove the socket while the pool is still telling of the lost connection.
type blockingLost struct {
	recordingHandler
	first   sync.Once
	holding chan struct{}
	release chan struct{}
}

func (h *blockingLost) Lost(socket string, err error) {
	h.first.Do(func() {
		close(h.holding)
		<-h.release
	})
	h.recordingHandler.Lost(socket, err)
}

// The removal can be noticed while the lost connection is still being
// told of: the handler must hear both, in that order, and a socket back
// at the path meanwhile is served only after: the old connection's last
// word must not fall on the new one.
func TestLostSaysGoneWhenRemovedWhileTheLossIsTold(t *testing.T) {
	dir := t.TempDir()
	h := &blockingLost{recordingHandler: *newRecordingHandler(), holding: make(chan struct{}), release: make(chan struct{})}
	p, _ := runPoolWith(t, fastRetries(dir), h)
	released := sync.OnceFunc(func() { close(h.release) })
	t.Cleanup(released) // before the pool stops: a failed test must not hold it
	f := libvirtxtest.New(t, filepath.Join(dir, "launcher.sock"))
	h.waitServed(t, f.Path())
	f.Kill()
	<-h.holding
	if err := os.Remove(f.Path()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		_, watched := p.running[f.Path()]
		p.mu.Unlock()
		if !watched {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socket removed and still watched after 5 s")
		}
	}
	back := libvirtxtest.New(t, f.Path())
	time.Sleep(100 * time.Millisecond) // rescans that must not serve it yet
	select {
	case s := <-h.served:
		t.Fatalf("%s served again while its old connection's loss was still being told", s)
	default:
	}
	released()
	if err := h.waitLost(t, f.Path()); errors.Is(err, ErrSocketGone) {
		t.Fatalf("connection lost first: Lost got %v, want the lost connection", err)
	}
	if err := h.waitLost(t, f.Path()); !errors.Is(err, ErrSocketGone) {
		t.Fatalf("socket removed while its loss was told: Lost got %v, want ErrSocketGone", err)
	}
	h.waitServed(t, back.Path())
}

// Where a glob's wildcards reach into what pods write, a pod's directory
// linked to another pod's does not get ferryd to dial that pod's libvirt
// under the first pod's path: no link is followed below the glob's root.
func TestGlobMatchesAreReachedWithoutLinksBelowTheGlobsRoot(t *testing.T) {
	pods := t.TempDir()
	for _, d := range []string{"good/rt", "evil"} {
		if err := os.MkdirAll(filepath.Join(pods, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(pods, "good", "rt"), filepath.Join(pods, "evil", "rt")); err != nil {
		t.Fatal(err)
	}
	p, h, _ := runPool(t, PoolConfig{Glob: filepath.Join(pods, "*", "rt", "*.sock"), RescanEvery: 20 * time.Millisecond, CallTimeout: time.Second})
	launcher := libvirtxtest.New(t, filepath.Join(pods, "good", "rt", "l.sock"))
	h.waitServed(t, launcher.Path())
	through := filepath.Join(pods, "evil", "rt", "l.sock")
	deadline := time.Now().Add(5 * time.Second)
	for {
		var st *SocketStatus
		for _, s := range p.Status() {
			if s.Socket == through {
				st = &s
			}
		}
		if st != nil && !st.Up && strings.Contains(st.LastError, "symbolic link") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %+v: want %s refused for the link on its way", p.Status(), through)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := launcher.Connections(); n != 1 {
		t.Errorf("the good pod's libvirt took %d connections, want its own one", n)
	}
}
