package migration

import (
	"context"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
)

// These tests drive the tracker's state machine with the exact event and
// state codes libvirt 11.3 produces (see the test bed notes); the real
// boundary is covered by the end-to-end suite.

const sock = "/run/libvirt/libvirt-sock"

var dom = libvirt.Domain{Name: "default_vm1", UUID: libvirt.UUID{1, 2, 3}}

func lifecycle(ev, detail int32) libvirtx.Event {
	return libvirtx.Event{Kind: libvirtx.KindLifecycle, Socket: sock, Domain: dom, Event: ev, Detail: detail, Time: time.Now()}
}

func iteration(n int32) libvirtx.Event {
	return libvirtx.Event{Kind: libvirtx.KindIteration, Socket: sock, Domain: dom, Iteration: n, Time: time.Now()}
}

func running(reason int32) libvirtx.Domain {
	return libvirtx.Domain{Ref: dom, Name: dom.Name, State: libvirtx.StateRunning, Reason: reason}
}

func paused(reason int32) libvirtx.Domain {
	return libvirtx.Domain{Ref: dom, Name: dom.Name, State: libvirtx.StatePaused, Reason: reason}
}

func outgoing(iter, remainingMiB uint64) libvirtx.JobStats {
	return libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, MemoryIteration: iter,
		DataTotal: 512 << 20, MemoryTotal: 512 << 20, DataRemaining: remainingMiB << 20, DataProcessed: (512 - remainingMiB) << 20,
		MemoryRemaining: remainingMiB << 20, MemoryBps: 100 << 20, MemoryDirtyRate: 200 << 20, TimeElapsedMs: 1000 * iter}
}

func TestSourcePreCopyStallsThenCompletes(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	now := time.Now()
	if tr.onStats(sock, running(1), libvirtx.JobStats{Type: libvirtx.JobNone}, nil, nil, now) {
		t.Fatal("an idle domain must not be treated as an ended job")
	}
	tr.onStats(sock, running(1), outgoing(1, 500), nil, nil, now)
	for i, rem := range []uint64{380, 384, 381} {
		tr.onEvent(iteration(int32(i + 2)))
		tr.onStats(sock, running(1), outgoing(uint64(i+2), rem), nil, nil, now)
	}
	j, ok := tr.Job(dom.Name)
	if !ok || j.Role != RoleSource || j.Phase != PhaseRunning {
		t.Fatalf("job %+v", j)
	}
	if j.Convergence != VerdictStalled {
		t.Fatalf("convergence %s (%s), want Stalled", j.Convergence, j.ConvergenceReason)
	}
	if j.Namespace != "default" || j.Name != "vm1" || j.DirtyRateBytesPerSecond != 200<<20 || j.Iteration != 4 {
		t.Fatalf("figures %+v", j)
	}
	if len(j.Iterations) != 4 || len(j.Samples) != 4 {
		t.Fatalf("%d iterations, %d samples", len(j.Iterations), len(j.Samples))
	}
	tr.onEvent(lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedMigrated))
	tr.onEvent(lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated))
	j, _ = tr.Job(dom.Name)
	if j.Phase != PhaseCompleted || j.EndTime == nil || j.ProgressPercent != 100 {
		t.Fatalf("after stopped/migrated: %+v", j)
	}
	if got := tr.Snapshot().Totals[Total{RoleSource, "completed"}]; got != 1 {
		t.Fatalf("completed total %d", got)
	}
}

func TestSourcePostCopyFailedByEvent(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	tr.onStats(sock, running(1), outgoing(1, 300), nil, nil, time.Now())
	tr.onEvent(lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy))
	if j, _ := tr.Job(dom.Name); j.Mode != ModePostCopy {
		t.Fatalf("mode %s after suspended/post-copy", j.Mode)
	}
	tr.onEvent(lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed))
	j, _ := tr.Job(dom.Name)
	if j.Phase != PhasePostCopyFailed || !strings.Contains(j.FailureReason, "split across two hosts") {
		t.Fatalf("phase %s reason %q", j.Phase, j.FailureReason)
	}
	// libvirt keeps the job "active" after a post-copy failure; a later
	// sample must not reopen it, and the state scan must not duplicate it.
	tr.updateDomains(sock, []libvirtx.Domain{paused(libvirtx.PausedPostCopyFailed)}, time.Now())
	if n := len(tr.Jobs(false)); n != 0 {
		t.Fatalf("%d in-flight jobs after the failure", n)
	}
	if n := len(tr.Jobs(true)); n != 1 {
		t.Fatalf("%d jobs in history, want 1", n)
	}
	doms := tr.Domains()
	if len(doms) != 1 || doms[0].Attention == "" || doms[0].AttentionReason != "postcopy_failed" {
		t.Fatalf("domain not flagged: %+v", doms)
	}
}

func TestTargetLifecycle(t *testing.T) {
	tr := NewTracker(Config{Node: "b"})
	tr.onEvent(lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated))
	tr.onEvent(lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopy))
	j, _ := tr.Job(dom.Name)
	if j.Role != RoleTarget || j.Mode != ModePostCopy || j.Phase != PhaseRunning {
		t.Fatalf("target job %+v", j)
	}
	tr.onEvent(lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopyFailed))
	j, _ = tr.Job(dom.Name)
	if j.Phase != PhasePostCopyFailed {
		t.Fatalf("phase %s", j.Phase)
	}
}

func TestTargetCompletesFromState(t *testing.T) {
	tr := NewTracker(Config{Node: "b"})
	tr.onEvent(lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated))
	probe := tr.updateDomains(sock, []libvirtx.Domain{paused(libvirtx.PausedMigration)}, time.Now())
	if len(probe) != 0 {
		t.Fatal("target domains must not be probed for job stats (libvirt refuses)")
	}
	tr.updateDomains(sock, []libvirtx.Domain{running(libvirtx.RunningMigrated)}, time.Now())
	if j, _ := tr.Job(dom.Name); j.Phase != PhaseCompleted {
		t.Fatalf("phase %s", j.Phase)
	}
}

func TestRecoveryFindsFailedDomainOnce(t *testing.T) {
	tr := NewTracker(Config{Node: "b"})
	for i := 0; i < 3; i++ {
		tr.updateDomains(sock, []libvirtx.Domain{running(libvirtx.RunningPostCopyFailed)}, time.Now())
	}
	jobs := tr.Jobs(true)
	if len(jobs) != 1 || jobs[0].Phase != PhasePostCopyFailed || jobs[0].Role != RoleTarget {
		t.Fatalf("jobs %+v", jobs)
	}
}

func TestSourceAbortedFromCompletedStats(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	tr.onStats(sock, running(1), outgoing(1, 300), nil, nil, time.Now())
	if !tr.onStats(sock, running(1), libvirtx.JobStats{Type: libvirtx.JobNone}, nil, nil, time.Now()) {
		t.Fatal("a vanished libvirt job must ask for its outcome")
	}
	done := libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut, ErrMsg: "operation aborted"}
	tr.onEnded(sock, running(1), done, nil, libvirtx.StateRunning, 1, nil, time.Now())
	j, _ := tr.Job(dom.Name)
	if j.Phase != PhaseAborted {
		t.Fatalf("phase %s reason %q", j.Phase, j.FailureReason)
	}
}

func TestWatchDeliversFinalState(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := tr.Watch(ctx)
	tr.onStats(sock, running(1), outgoing(1, 300), nil, nil, time.Now())
	for i := 0; i < 50; i++ {
		tr.onStats(sock, running(1), outgoing(1, 300-uint64(i)), nil, nil, time.Now())
	}
	tr.onEvent(lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated))
	timeout := time.After(5 * time.Second)
	for {
		select {
		case j := <-ch:
			if j.Phase == PhaseCompleted {
				return
			}
		case <-timeout:
			t.Fatal("final state never reached the watcher")
		}
	}
}

func TestFailureAfterPostCopySwitchIsPostCopyFailed(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	tr.onStats(sock, running(1), outgoing(1, 300), nil, nil, time.Now())
	tr.onEvent(lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy))
	// libvirt lost its control connection first and dropped the job,
	// leaving the source paused in post-copy.
	tr.onEnded(sock, paused(libvirtx.PausedPostCopy), libvirtx.JobStats{}, nil, libvirtx.StatePaused, libvirtx.PausedPostCopy, nil, time.Now())
	j, _ := tr.Job(dom.Name)
	if j.Phase != PhasePostCopyFailed {
		t.Fatalf("phase %s (%s), want PostCopyFailed", j.Phase, j.FailureReason)
	}
}

func TestTargetNotRediscoveredRightAfterCompletion(t *testing.T) {
	tr := NewTracker(Config{Node: "b"})
	tr.onEvent(lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated))
	tr.onEvent(lifecycle(libvirtx.EventResumed, libvirtx.ResumedMigrated))
	targetOnly := libvirt.Error{Code: 84, Message: "migration statistics are available only on the source host"}
	tr.onStats(sock, paused(libvirtx.PausedMigration), libvirtx.JobStats{}, targetOnly, nil, time.Now())
	if n := len(tr.Jobs(true)); n != 1 {
		t.Fatalf("%d jobs, want the one completed job", n)
	}
}

func TestGuestPausedMidPreCopyIsPausedMode(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	tr.onStats(sock, running(1), outgoing(1, 300), nil, nil, time.Now())
	tr.updateDomains(sock, []libvirtx.Domain{paused(libvirtx.PausedUser)}, time.Now())
	if j, _ := tr.Job(dom.Name); j.Mode != ModePaused {
		t.Fatalf("mode %s, want Paused", j.Mode)
	}
	tr.updateDomains(sock, []libvirtx.Domain{running(5)}, time.Now())
	if j, _ := tr.Job(dom.Name); j.Mode != ModePreCopy {
		t.Fatalf("mode %s after resume, want PreCopy", j.Mode)
	}
}

func TestStartTimeIsLibvirtsJobStart(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	tr.onEvent(iteration(1)) // found at the first iteration event
	found, _ := tr.Job(dom.Name)
	s := outgoing(1, 400)
	s.TimeElapsedMs = 3000
	now := time.Now()
	tr.onStats(sock, running(1), s, nil, nil, now)
	j, _ := tr.Job(dom.Name)
	if want := now.Add(-3 * time.Second); !j.StartTime.Equal(want) || !j.StartTime.Before(found.StartTime) {
		t.Fatalf("start %v, want libvirt's job start %v (found at %v)", j.StartTime, want, found.StartTime)
	}
}
