package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferry-vm/ferry/internal/testsock"
	"github.com/ferry-vm/ferry/peer"
)

// recoveringIncoming is fakeIncoming that resumes post-copy: Recover
// listens where the target QEMU would after migrate-recover, echoing.
type recoveringIncoming struct {
	*fakeIncoming
	rmu       sync.Mutex
	armed     []string // sockets, in order
	monitors  []string
	recovered string // Recovered's answer
	completed bool   // QEMU here has every page: Recover arms nothing
	// begins are the source's Begin cookies it was asked with on
	// libvirt's route (the migration's LibvirtResume), finishes what
	// Resumed got.
	begins   []string
	finishes []string
}

func (f *recoveringIncoming) Recover(_ context.Context, m peer.IncomingMigration, socket string, r peer.Resume) (string, []byte, error) {
	f.rmu.Lock()
	completed, byLibvirt := f.completed, m.LibvirtResume
	f.rmu.Unlock()
	if completed {
		return peer.QEMUCompleted, nil, nil
	}
	if byLibvirt && !r.ByLibvirt {
		return "", nil, peer.ErrResumeByLibvirt
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return "", nil, err
	}
	go testsock.Accept(ln, testsock.Echo)
	f.rmu.Lock()
	defer f.rmu.Unlock()
	f.armed = append(f.armed, socket)
	f.monitors = append(f.monitors, m.MonitorPath)
	if !byLibvirt {
		return "postcopy-paused", nil, nil
	}
	f.begins = append(f.begins, string(r.Cookie))
	return "postcopy-paused", []byte("prepare-resume"), nil
}

func (f *recoveringIncoming) Resumed(_ context.Context, _ peer.IncomingMigration, cookie []byte, cancelled bool) ([]byte, error) {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	f.finishes = append(f.finishes, fmt.Sprintf("%s cancelled=%v", cookie, cancelled))
	if cancelled {
		return nil, errors.New("the resume was cancelled")
	}
	return []byte("finish-resume"), nil
}

func (f *recoveringIncoming) Recovered(context.Context, peer.IncomingMigration) (string, bool, error) {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	if f.recovered == "" {
		return "", false, errors.New("libvirt's job still runs")
	}
	return f.recovered, true, nil
}

// splitPostCopy prepares a post-copy migration id on a target keeping
// records in dir, relays some of it, and has its finish leave it split.
func splitPostCopy(t *testing.T, src *node, dir, id string) (*node, *recoveringIncoming) {
	return splitPostCopyBy(t, src, dir, id, false)
}

// splitPostCopyBy is splitPostCopy of a migration resumed by libvirt's
// own protocol where byLibvirt: its source and this node's libvirt do.
func splitPostCopyBy(t *testing.T, src *node, dir, id string, byLibvirt bool) (*node, *recoveringIncoming) {
	t.Helper()
	in := &recoveringIncoming{fakeIncoming: newFakeIncoming()}
	in.resumes = byLibvirt
	in.outcome = func(peer.IncomingMigration) (string, error) { return peer.OutcomeSplit, nil }
	in.finishErr = errors.New("job 'migration in' failed in post-copy phase")
	dst := startNodeWith(t, Config{OutcomeDir: dir, Incoming: in})
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: id, Domain: "vm",
		XML: testXML, Cookie: []byte("begin"), Flags: 1, PostCopy: true, RecoverSeconds: 300, LibvirtResume: byLibvirt}); err != nil {
		t.Fatal(err)
	}
	sm, err := src.p.OpenSource(id, dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, sm.Paths[peer.KindMemory], 1024)
	sm.Close("the streams broke")
	if resp, _ := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: id, Domain: "vm"}); resp.Outcome != peer.OutcomeSplit {
		t.Fatalf("the finish answered %+v, want split", resp)
	}
	return dst, in
}

// Each attempt gets a fresh stream, which relays to where the target QEMU
// listens, and only to the peer that prepared the migration.
func TestRecoveryOpensAFreshStreamEachAttempt(t *testing.T) {
	src := startNode(t, nil)
	dst, in := splitPostCopy(t, src, t.TempDir(), "pc")
	var streams []string
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "pc", Domain: "vm"})
		if err != nil || peer.ValidID(resp.Migration) != nil {
			t.Fatalf("recover answered %+v, %v", resp, err)
		}
		sm, err := src.p.OpenSource(resp.Migration, dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, sm.Paths[peer.KindMemory], 4096)
		sm.Close("attempt over")
		streams = append(streams, resp.Migration)
	}
	if streams[0] == streams[1] {
		t.Fatal("two attempts shared a stream id")
	}
	in.rmu.Lock()
	if len(in.armed) != 2 || in.monitors[0] != HiddenMonitorPath(dst.p.SocketDir(), "pc") {
		t.Errorf("armed %v on monitors %v", in.armed, in.monitors)
	}
	in.rmu.Unlock()
	// Another peer, knowing the id, gets nothing.
	other := startNode(t, nil)
	if _, err := other.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "pc", Domain: "other"}); err == nil {
		t.Fatal("a recovery of another domain's name was armed")
	}
	// Once the guest runs whole there, the kept answer says so.
	in.rmu.Lock()
	in.recovered = peer.OutcomeRunning
	in.rmu.Unlock()
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecovered, Migration: "pc", Domain: "vm"})
	if err != nil || resp.Outcome != peer.OutcomeRunning || !resp.Persisted {
		t.Fatalf("recovered answered %+v, %v", resp, err)
	}
	if again := finish(t, src, dst, "pc", false); again.Outcome != peer.OutcomeRunning {
		t.Fatalf("a repeated finish after the recovery answered %+v, want running", again)
	}
}

// A recovery asked while libvirt's job still runs is "ask again", and a
// migration that never was split is never armed.
func TestRecoveryOnlyOfASplitPostCopy(t *testing.T) {
	src := startNode(t, nil)
	dst, in := splitPostCopy(t, src, t.TempDir(), "pc")
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecovered, Migration: "pc", Domain: "vm"}); err == nil {
		t.Fatal("recovered answered while libvirt's job still runs")
	}
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "never", Domain: "vm"}); err == nil {
		t.Fatal("a recovery of an unknown migration was armed")
	}
	in.rmu.Lock()
	defer in.rmu.Unlock()
	if len(in.armed) != 0 {
		t.Fatalf("armed %v", in.armed)
	}
}

// Once Prepare has returned, the target QEMU's monitor is moved where no
// QEMU may reach it, and still answers there; anything else found in its
// place (a link planted by another QEMU) is removed, never followed.
func TestTheMonitorIsMovedOutOfQEMUsReach(t *testing.T) {
	n := startNode(t, nil)
	dir := n.p.SocketDir()
	in := peer.IncomingMigration{ID: "pc", Domain: "vm", MonitorPath: TargetMonitorPath(dir, "pc")}
	testsock.Serve(t, in.MonitorPath, func(c net.Conn) { c.Write([]byte("hello\n")) })
	n.p.hideMonitor(in)
	if _, err := os.Lstat(in.MonitorPath); !os.IsNotExist(err) {
		t.Fatalf("the monitor is still in the socket dir: %v", err)
	}
	c, err := net.Dial("unix", HiddenMonitorPath(dir, "pc"))
	if err != nil {
		t.Fatalf("the moved monitor does not answer: %v", err)
	}
	c.Close()
	if fi, err := os.Stat(filepath.Dir(HiddenMonitorPath(dir, "pc"))); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("the monitors' directory is %v, %v: not ferryd's alone", fi.Mode(), err)
	}
	planted := peer.IncomingMigration{ID: "pl", Domain: "vm", MonitorPath: TargetMonitorPath(dir, "pl")}
	if err := os.Symlink("/run/libvirt/libvirt-sock", planted.MonitorPath); err != nil {
		t.Fatal(err)
	}
	n.p.hideMonitor(planted)
	if _, err := os.Lstat(planted.MonitorPath); !os.IsNotExist(err) {
		t.Fatal("a planted link was left in place")
	}
	if _, err := os.Lstat(HiddenMonitorPath(dir, "pl")); !os.IsNotExist(err) {
		t.Fatal("a planted link was moved in as a monitor")
	}
}

// A recovery that finds QEMU here already completed hands out no stream
// (nothing would listen behind it): the source asks what libvirt made of
// it, and the migration's record stays until it is answered.
func TestARecoveryOfAMigrationCompletedHereHandsOutNoStream(t *testing.T) {
	src := startNode(t, nil)
	dst, in := splitPostCopy(t, src, t.TempDir(), "pc")
	in.rmu.Lock()
	in.completed = true
	in.rmu.Unlock()
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "pc", Domain: "vm"})
	if err != nil || resp.Outcome != peer.OutcomeRunning || resp.Migration != "" {
		t.Fatalf("recover answered %+v, %v; want running with no stream", resp, err)
	}
	in.rmu.Lock()
	in.recovered = peer.OutcomeRunning
	in.rmu.Unlock()
	if resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecovered, Migration: "pc", Domain: "vm"}); err != nil || resp.Outcome != peer.OutcomeRunning {
		t.Fatalf("recovered answered %+v, %v", resp, err)
	}
}

// Where libvirt resumes the post-copy itself, a recovery without the
// source's Begin is told so, uncounted as a refusal; with it, the migration's
// own streams are cut (libvirt's resume wants its job failed here), a fresh
// stream is armed with libvirt's cookie, and the resume's Finish answers with
// libvirt's cookie for the source's Confirm.
func TestARecoveryByLibvirtTakesTheSourcesBeginAndFinishes(t *testing.T) {
	src := startNode(t, nil)
	dst, in := splitPostCopyBy(t, src, t.TempDir(), "pc", true)
	rejected := testutil.CollectAndCount(dst.p.metrics.Rejected)
	_, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "pc", Domain: "vm"})
	var ce *peer.ControlError
	if !errors.As(err, &ce) || ce.Reason != peer.ReasonResumeByLibvirt {
		t.Fatalf("a recovery without the source's Begin answered %v, want %s", err, peer.ReasonResumeByLibvirt)
	}
	if now := testutil.CollectAndCount(dst.p.metrics.Rejected); now != rejected || rejectedOf(dst, peer.ReasonResumeByLibvirt) != 0 {
		t.Errorf("the route's answer counted as a refusal: %v, was %v", now, rejected)
	}
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "pc", Domain: "vm",
		LibvirtResume: true, Cookie: []byte("begin-resume")})
	if err != nil || peer.ValidID(resp.Migration) != nil || string(resp.Cookie) != "prepare-resume" {
		t.Fatalf("a recovery with the source's Begin answered %+v, %v", resp, err)
	}
	if _, ok := dst.p.reg.live("pc"); ok {
		t.Error("the migration's own streams were kept while libvirt's resume waits for its job to fail")
	}
	sm, err := src.p.OpenSource(resp.Migration, dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, sm.Paths[peer.KindMemory], 4096)
	fin, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpResumed, Migration: "pc", Domain: "vm", Cookie: []byte("perform-resume")})
	sm.Close("resumed")
	if err != nil || fin.Outcome != peer.OutcomeRunning || string(fin.Cookie) != "finish-resume" {
		t.Fatalf("the resume's finish answered %+v, %v", fin, err)
	}
	in.rmu.Lock()
	defer in.rmu.Unlock()
	if len(in.begins) != 1 || in.begins[0] != "begin-resume" || len(in.finishes) != 1 || in.finishes[0] != "perform-resume cancelled=false" {
		t.Fatalf("libvirt's target got begins %q and finishes %q", in.begins, in.finishes)
	}
}

// A post-copy's target QEMU gets Ferry's monitor unless both its source
// and this node's libvirt resume post-copy by libvirt's own protocol: an
// older source, or a libvirt that crashes on that (11.2, 11.3), keeps it.
func TestAMonitorIsGivenOnlyWhereLibvirtCannotResume(t *testing.T) {
	for _, c := range []struct {
		name            string
		source, libvirt bool
		monitor         bool
	}{
		{"both resume by libvirt", true, true, false},
		{"an older source", false, true, true},
		{"a libvirt that crashes on it", true, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := startNode(t, nil)
			in := newFakeIncoming()
			in.resumes = c.libvirt
			dst := startNodeWith(t, Config{Incoming: in})
			resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "pc", Domain: "vm",
				XML: testXML, Cookie: []byte("begin"), Flags: 1, PostCopy: true, RecoverSeconds: 300, LibvirtResume: c.source})
			if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			in.mu.Lock()
			got := in.prepared[0]
			in.mu.Unlock()
			if got.LibvirtResume == c.monitor || got.MonitorPath == "" {
				t.Fatalf("Prepare was told LibvirtResume %v (monitor path %q), want %v", got.LibvirtResume, got.MonitorPath, !c.monitor)
			}
			_, serr := os.Lstat(HiddenMonitorPath(dst.p.SocketDir(), resp.Migration))
			if kept := serr == nil; kept != c.monitor {
				t.Fatalf("the target QEMU's monitor kept: %v (%v), want %v", kept, serr, c.monitor)
			}
		})
	}
}

// The route a post-copy is resumed by is the one its prepare chose, kept
// in its record: a ferryd restarted since resumes it the same way.
func TestTheResumeRouteOutlivesARestart(t *testing.T) {
	src := startNode(t, nil)
	dir := t.TempDir()
	dst, _ := splitPostCopyBy(t, src, dir, "pc", true)
	// Its split post-copy is held: the drain is cut short, as a SIGKILL would.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	dst.p.Shutdown(ctx)
	cancel()
	in := &recoveringIncoming{fakeIncoming: newFakeIncoming()}
	in.outcome = func(peer.IncomingMigration) (string, error) { return peer.OutcomeSplit, nil }
	again := startNodeWith(t, Config{OutcomeDir: dir, Incoming: in})
	_, err := src.p.Control(context.Background(), again.addr, peer.ControlRequest{Op: peer.OpRecover, Migration: "pc", Domain: "vm"})
	var ce *peer.ControlError
	if !errors.As(err, &ce) || ce.Reason != peer.ReasonResumeByLibvirt {
		t.Fatalf("a recovery asked of the restarted target: %v, want %s: the route its prepare chose", err, peer.ReasonResumeByLibvirt)
	}
}
