package migration

import (
	"context"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// These tests drive the tracker's state machine with the exact event and
// state codes libvirt 11.3 produces (see the test bed notes); the real
// boundary is covered by the end-to-end suite.

const sock = "/run/libvirt/libvirt-sock"

var dom = libvirt.Domain{Name: "default_vm1", UUID: libvirt.UUID{1, 2, 3}, ID: 7}

// feed applies inputs as the sampler and the event loop would.
type feed struct {
	t   *testing.T
	tr  *Tracker
	dom libvirt.Domain
	now time.Time
}

func newFeed(t *testing.T, node string) *feed {
	return &feed{t: t, tr: NewTracker(Config{Node: node}), dom: dom, now: time.Now()}
}

// tick moves the feed's clock: inputs are ordered by when they were true.
func (f *feed) tick() time.Time {
	f.now = f.now.Add(100 * time.Millisecond)
	return f.now
}

func (f *feed) lifecycle(ev, detail int32) []action {
	at := f.tick()
	e := libvirtx.Event{Kind: libvirtx.KindLifecycle, Socket: sock, Domain: f.dom, Event: ev, Detail: detail, Time: at}
	return f.tr.apply(input{kind: inLifecycle, socket: sock, dom: f.dom, at: at, event: e})
}

func (f *feed) iteration(n int32) []action {
	at := f.tick()
	e := libvirtx.Event{Kind: libvirtx.KindIteration, Socket: sock, Domain: f.dom, Iteration: n, Time: at}
	return f.tr.apply(input{kind: inIteration, socket: sock, dom: f.dom, at: at, event: e})
}

// stats applies a reading asked at `asked` (a stale one when earlier than
// inputs already applied) that arrives now.
func (f *feed) statsAsked(asked time.Time, s libvirtx.JobStats, err error) []action {
	return f.tr.apply(input{kind: inStats, socket: sock, dom: f.dom, at: asked, got: f.tick(), stats: s, err: err})
}

func (f *feed) stats(s libvirtx.JobStats) []action { return f.statsAsked(f.tick(), s, nil) }

func (f *feed) list(doms ...libvirtx.Domain) []action {
	return f.tr.apply(input{kind: inList, socket: sock, at: f.tick(), got: f.now, list: doms})
}

func (f *feed) ended(done libvirtx.JobStats, derr error, st libvirtx.State, reason int32, serr error) {
	f.tr.apply(input{kind: inEnded, socket: sock, dom: f.dom, at: f.tick(), stats: done, err: derr, state: st, reason: reason, serr: serr})
}

func (f *feed) job() api.Job {
	f.t.Helper()
	j, ok := f.tr.Job(f.dom.Name)
	if !ok {
		f.t.Fatal("no job recorded")
	}
	return j
}

func (f *feed) wantPhase(p api.Phase) api.Job {
	f.t.Helper()
	j := f.job()
	if j.Phase != p {
		f.t.Fatalf("phase %s (%s), want %s", j.Phase, j.FailureReason, p)
	}
	return j
}

func (f *feed) wantJobs(inFlight, all int) {
	f.t.Helper()
	if n, m := len(f.tr.Jobs(false)), len(f.tr.Jobs(true)); n != inFlight || m != all {
		f.t.Fatalf("%d in flight, %d in all; want %d and %d", n, m, inFlight, all)
	}
}

func (f *feed) wantTotal(role api.Role, result string, n uint64) {
	f.t.Helper()
	if got := f.tr.Snapshot().Count(role, result); got != n {
		f.t.Fatalf("%s %s total %d, want %d", role, result, got, n)
	}
}

func domIn(st libvirtx.State, reason int32) libvirtx.Domain {
	return libvirtx.Domain{Ref: dom, Name: dom.Name, UUID: libvirtx.UUIDString(dom.UUID), State: st, Reason: reason}
}

func running(reason int32) libvirtx.Domain { return domIn(libvirtx.StateRunning, reason) }
func paused(reason int32) libvirtx.Domain  { return domIn(libvirtx.StatePaused, reason) }

func outgoing(iter, remainingMiB uint64) libvirtx.JobStats {
	return libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, MemoryIteration: iter,
		DataTotal: 512 << 20, MemoryTotal: 512 << 20, DataRemaining: remainingMiB << 20, DataProcessed: (512 - remainingMiB) << 20,
		MemoryRemaining: remainingMiB << 20, MemoryBps: 100 << 20, MemoryDirtyRate: 200 << 20, TimeElapsedMs: 1000 * iter}
}

var (
	idle      = libvirtx.JobStats{Type: libvirtx.JobNone}
	noDomain  = libvirt.Error{Code: uint32(libvirt.ErrNoDomain), Message: "Domain not found"}
	notActive = libvirtx.JobStats{}
)

func hasAction(acts []action, what followUp) bool {
	for _, a := range acts {
		if a.what == what {
			return true
		}
	}
	return false
}

func TestSourcePreCopyStallsThenCompletes(t *testing.T) {
	f := newFeed(t, "a")
	if hasAction(f.stats(idle), settle) {
		t.Fatal("an idle domain must not be treated as an ended job")
	}
	f.stats(outgoing(1, 500))
	for i, rem := range []uint64{380, 384, 381} {
		f.iteration(int32(i + 2))
		f.stats(outgoing(uint64(i+2), rem))
	}
	j := f.wantPhase(api.PhaseRunning)
	if j.Role != api.RoleSource || j.Convergence != api.VerdictStalled {
		t.Fatalf("role %s convergence %s (%s), want source, Stalled", j.Role, j.Convergence, j.ConvergenceReason)
	}
	if j.Namespace != "default" || j.Name != "vm1" || j.DirtyRateBytesPerSecond != 200<<20 || j.Iteration != 4 {
		t.Fatalf("figures %+v", j)
	}
	if len(j.Iterations) != 4 || len(j.Samples) != 4 {
		t.Fatalf("%d iterations, %d samples", len(j.Iterations), len(j.Samples))
	}
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedMigrated)
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	j = f.wantPhase(api.PhaseCompleted)
	if j.EndTime == nil || j.ProgressPercent != 100 {
		t.Fatalf("after stopped/migrated: %+v", j)
	}
	f.wantTotal(api.RoleSource, "completed", 1)
}

func TestSourcePostCopyFailedByEvent(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	if j := f.job(); j.Mode != api.ModePostCopy {
		t.Fatalf("mode %s after suspended/post-copy", j.Mode)
	}
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	if j := f.wantPhase(api.PhasePostCopyFailed); !strings.Contains(j.FailureReason, "split across two hosts") {
		t.Fatalf("reason %q", j.FailureReason)
	}
	// libvirt keeps the job "active" after a post-copy failure; later
	// readings and scans must neither reopen nor duplicate it.
	f.list(paused(libvirtx.PausedPostCopyFailed))
	f.stats(outgoing(2, 100))
	f.wantJobs(0, 1)
	f.wantTotal(api.RoleSource, "postcopy_failed", 1)
	doms := f.tr.Domains()
	if len(doms) != 1 || doms[0].Attention == "" || doms[0].AttentionReason != "postcopy_failed" {
		t.Fatalf("domain not flagged: %+v", doms)
	}
}

func TestTargetLifecycle(t *testing.T) {
	f := newFeed(t, "b")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopy)
	if j := f.wantPhase(api.PhaseRunning); j.Role != api.RoleTarget || j.Mode != api.ModePostCopy {
		t.Fatalf("target job %+v", j)
	}
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyFailed)
}

func TestTargetCompletesFromState(t *testing.T) {
	f := newFeed(t, "b")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.list(paused(libvirtx.PausedMigration))
	f.wantPhase(api.PhaseRunning)
	f.list(running(libvirtx.RunningMigrated))
	f.wantPhase(api.PhaseCompleted)
}

func TestRecoveryFindsFailedDomainOnce(t *testing.T) {
	f := newFeed(t, "b")
	for i := 0; i < 3; i++ {
		f.list(running(libvirtx.RunningPostCopyFailed))
	}
	jobs := f.tr.Jobs(true)
	if len(jobs) != 1 || jobs[0].Phase != api.PhasePostCopyFailed || jobs[0].Role != api.RoleTarget {
		t.Fatalf("jobs %+v", jobs)
	}
}

func TestSourceAbortedFromCompletedStats(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	if !hasAction(f.stats(idle), settle) {
		t.Fatal("a vanished libvirt job must ask for its outcome")
	}
	done := libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut, ErrMsg: "operation aborted"}
	f.ended(done, nil, libvirtx.StateRunning, 1, nil)
	f.wantPhase(api.PhaseAborted)
}

func TestWatchDeliversFinalState(t *testing.T) {
	f := newFeed(t, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := f.tr.Watch(ctx)
	for i := 0; i < 50; i++ {
		f.stats(outgoing(1, 300-uint64(i)))
	}
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	timeout := time.After(5 * time.Second)
	for {
		select {
		case j := <-ch:
			if j.Phase == api.PhaseCompleted {
				return
			}
		case <-timeout:
			t.Fatal("final state never reached the watcher")
		}
	}
}

func TestFailureAfterPostCopySwitchIsPostCopyFailed(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	// libvirt lost its control connection first and dropped the job,
	// leaving the source paused in post-copy.
	f.stats(idle)
	f.ended(notActive, nil, libvirtx.StatePaused, libvirtx.PausedPostCopy, nil)
	f.wantPhase(api.PhasePostCopyFailed)
}

func TestTargetNotRediscoveredAfterCompletion(t *testing.T) {
	f := newFeed(t, "b")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedMigrated)
	// libvirt still calls the incoming job active for a moment after the
	// completion event: the same QEMU process, so the same migration.
	targetOnly := libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationIn}
	f.stats(targetOnly)
	f.wantJobs(0, 1)
	// A new QEMU process (new domain ID) is a new incoming migration.
	f.dom.ID++
	f.stats(targetOnly)
	f.wantJobs(1, 2)
}

func TestGuestPausedMidPreCopyIsPausedMode(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.list(paused(libvirtx.PausedUser))
	if j := f.job(); j.Mode != api.ModePaused {
		t.Fatalf("mode %s, want Paused", j.Mode)
	}
	f.list(running(5))
	if j := f.job(); j.Mode != api.ModePreCopy {
		t.Fatalf("mode %s after resume, want PreCopy", j.Mode)
	}
}

func TestStartTimeIsLibvirtsJobStart(t *testing.T) {
	f := newFeed(t, "a")
	s := outgoing(1, 400)
	s.TimeElapsedMs = 3000
	f.stats(s)
	j := f.job()
	if want := f.now.Add(-3 * time.Second); !j.StartTime.Equal(want) {
		t.Fatalf("start %v, want libvirt's job start %v", j.StartTime, want)
	}
}
