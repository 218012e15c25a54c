package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/testsock"
	"github.com/ferry-vm/ferry/peer"
)

// silentLinkIncoming is the target's libvirt for a post-copy whose link
// went silent: its Finish returns only once cut, the guest is "running,
// post-copy" (not settled) until QEMU here sees the break, "post-copy
// failed" (split) from then until the source's Perform of libvirt's
// resume, and "running, post-copy" again once the resumed stream moves.
type silentLinkIncoming struct {
	*fakeIncoming
	smu          sync.Mutex
	phase        string // active, failed, resumed
	finishCut    chan struct{}
	finishFailed chan struct{}
	resumedCalls int
}

func (f *silentLinkIncoming) Finish(ctx context.Context, m peer.IncomingMigration, cookie []byte, cancelled bool) ([]byte, error) {
	f.fakeIncoming.mu.Lock()
	f.finished = append(f.finished, cancelled)
	f.fakeIncoming.mu.Unlock()
	select {
	case <-ctx.Done():
		close(f.finishCut)
		return nil, ctx.Err()
	case <-f.failed():
		// QEMU here saw the break: libvirt's Finish fails.
		close(f.finishFailed)
		return nil, errors.New("job 'migration in' failed in post-copy phase")
	}
}

// failed is closed once QEMU here has seen the break.
func (f *silentLinkIncoming) failed() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for {
			f.smu.Lock()
			p := f.phase
			f.smu.Unlock()
			if p != "active" {
				close(ch)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ch
}

func (f *silentLinkIncoming) Outcome(context.Context, peer.IncomingMigration) (string, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	if f.phase == "failed" {
		return peer.OutcomeSplit, nil
	}
	return "", errors.New("domain vm is running (reason post-copy): not settled")
}

func (f *silentLinkIncoming) Recover(_ context.Context, m peer.IncomingMigration, socket string, r peer.Resume) (string, []byte, error) {
	if !r.ByLibvirt {
		return "", nil, peer.ErrResumeByLibvirt
	}
	// The source's pause reaches QEMU here through the proxies a moment
	// after the recovery was asked.
	time.Sleep(50 * time.Millisecond)
	f.smu.Lock()
	f.phase = "failed"
	f.smu.Unlock()
	// libvirt's resume Prepare takes the job only once the Finish that
	// held it has returned.
	select {
	case <-f.finishFailed:
	case <-time.After(5 * time.Second):
		return "", nil, errors.New("resuming failed post-copy migration of domain vm: the job is actively monitored by another thread")
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return "", nil, err
	}
	go testsock.Accept(ln, testsock.Echo)
	return "postcopy-paused", []byte("prepare-resume"), nil
}

func (f *silentLinkIncoming) Resumed(context.Context, peer.IncomingMigration, []byte, bool) ([]byte, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	f.resumedCalls++
	return []byte("finish-resume"), nil
}

// A recovery asked while the target's libvirt Finish still waits (a
// silent link: the source's QEMU paused first) must not cut that Finish
// before libvirt here has failed the post-copy: the split is recorded, and
// the resume's own Finish from the migration's source is taken, not
// refused as an unknown migration.
func TestAResumeAfterASilentLinkIsFinished(t *testing.T) {
	src := startNode(t, nil)
	in := &silentLinkIncoming{fakeIncoming: newFakeIncoming(), phase: "active", finishCut: make(chan struct{}), finishFailed: make(chan struct{})}
	in.resumes = true
	dst := startNodeWith(t, Config{OutcomeDir: t.TempDir(), Incoming: in})
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "pc", Domain: "vm",
		XML: testXML, Cookie: []byte("begin"), Flags: 1, PostCopy: true, RecoverSeconds: 300, LibvirtResume: true}); err != nil {
		t.Fatal(err)
	}
	sm, err := src.p.OpenSource("pc", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test over")
	roundTrip(t, sm.Paths[peer.KindMemory], 1024)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "pc", Domain: "vm", Cookie: []byte("perform")})
	}()
	waitMetric(t, func() bool { // the finish reaching libvirt
		in.fakeIncoming.mu.Lock()
		defer in.fakeIncoming.mu.Unlock()
		return len(in.finished) > 0
	})
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "pc", Domain: "vm"}); err == nil {
		t.Fatal("a recovery without the source's Begin was armed")
	}
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "pc", Domain: "vm",
		LibvirtResume: true, Cookie: []byte("begin-resume")})
	if err != nil || peer.ValidID(resp.Migration) != nil {
		t.Fatalf("a recovery with the source's Begin: %+v, %v", resp, err)
	}
	select {
	case <-finished:
		// Answered, or cut once the recovery was armed: the source has
		// moved on to its recovery by then.
	case <-time.After(5 * time.Second):
		t.Fatal("the migration's own finish never ended")
	}
	select {
	case <-in.finishCut:
		t.Fatal("the recovery cut the migration's own Finish before libvirt failed the post-copy here")
	default:
	}
	rs, err := src.p.OpenSource(resp.Migration, dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close("test over")
	roundTrip(t, rs.Paths[peer.KindMemory], 4096)
	in.smu.Lock()
	in.phase = "resumed"
	in.smu.Unlock()
	fin, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpResumed, Migration: "pc", Domain: "vm", Cookie: []byte("perform-resume")})
	in.smu.Lock()
	calls := in.resumedCalls
	in.smu.Unlock()
	if err != nil || calls != 1 || fin.Outcome != peer.OutcomeRunning {
		t.Fatalf("the resume's Finish from the migration's own source: %+v, %v (libvirt's Finish ran %d times)", fin, err, calls)
	}
}
