package migration

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// Situations a review of the state machine found it got wrong.

func TestVanishedJobIsSettledAgainUntilItEnds(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(2, 300))
	if !hasAction(f.list(), settleLater) {
		t.Fatal("first absence must schedule a settle")
	}
	// The settle could not read libvirt (a timeout): the job stays open...
	f.ended(notActive, nil, 0, 0, libvirtx.ErrTimeout)
	f.now = f.now.Add(vanishGrace)
	// ...and the next listing asks again instead of leaving it Running.
	if !hasAction(f.list(), settle) {
		t.Fatal("a job still vanished after the grace must be settled again")
	}
	f.ended(notActive, noDomain, 0, 0, noDomain)
	f.wantPhase(api.PhaseLost)
}

func TestTargetOfAPausedGuestCompletesFromLibvirtsRecord(t *testing.T) {
	f := newFeed(t, "b")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.list(paused(libvirtx.PausedMigration))
	// libvirt leaves a guest migrated paused paused: no running/migrated.
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPaused)
	if !hasAction(f.stats(idle), settle) {
		t.Fatal("an incoming job gone from libvirt must be settled")
	}
	done := libvirtx.JobStats{Type: libvirtx.JobCompleted, Operation: libvirtx.OperationMigrationIn, TimeElapsedMs: 3000}
	f.ended(done, nil, libvirtx.StatePaused, libvirtx.PausedUser, nil)
	f.wantPhase(api.PhaseCompleted)
}

func TestAnotherKindOfJobIsNotTheMigration(t *testing.T) {
	dump := libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: 8 /* dump */}
	if migrating(dump, nil) {
		t.Fatal("a dump job read as the migration still going on")
	}
	f := newFeed(t, "a")
	f.stats(outgoing(2, 300))
	if !hasAction(f.stats(dump), settle) {
		t.Fatal("the migration's job was replaced by another: settle it")
	}
}

func TestLingeringPostCopyFailureIsNotReportedAgainAfterHistoryTurnsOver(t *testing.T) {
	var reported atomic.Int32
	tr := NewTracker(Config{Node: "b", HistorySize: 2, OnFinish: func(j api.Job) {
		if j.Domain == dom.Name {
			reported.Add(1)
		}
	}})
	f := &feed{t: t, tr: tr, dom: dom, now: time.Now()}
	f.list(running(libvirtx.RunningPostCopyFailed))
	for i := 0; i < 5; i++ { // other domains' jobs push it out of the history
		other := newFeed(t, "b")
		other.tr = tr
		other.dom.Name, other.dom.UUID[0], other.dom.ID = "ns_other", byte(10+i), int32(100+i)
		other.stats(outgoing(1, 100))
		other.lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	}
	f.list(running(libvirtx.RunningPostCopyFailed))
	f.wantTotal(api.RoleTarget, "postcopy_failed", 1)
	if n := len(tr.Jobs(false)); n != 0 {
		t.Fatalf("%d in flight", n)
	}
	time.Sleep(100 * time.Millisecond) // OnFinish runs in its own goroutine
	if n := reported.Load(); n != 1 {
		t.Fatalf("the failure was handed on %d times, want once", n)
	}
}

func TestSplitBrainSourceIsKeptAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	first := &feed{t: t, tr: NewTracker(Config{Node: "a", StateDir: dir}), dom: dom, now: time.Now()}
	first.stats(outgoing(1, 300))
	first.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	first.list(running(libvirtx.RunningPostCopy)) // the source resumed its own vCPUs
	if j := first.wantPhase(api.PhasePostCopyFailed); !strings.Contains(j.FailureReason, "split brain") {
		t.Fatalf("reason %q", j.FailureReason)
	}
	first.list(running(libvirtx.RunningPostCopy)) // must not prune the record

	second := &feed{t: t, tr: NewTracker(Config{Node: "a", StateDir: dir}), dom: dom, now: first.now}
	second.list(running(libvirtx.RunningPostCopy))
	second.stats(outgoing(3, 100))                                    // libvirt keeps the failed job active
	second.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopy) // no phantom target
	second.wantJobs(0, 1)
	second.wantTotal(api.RoleSource, "postcopy_failed", 0)
	second.wantTotal(api.RoleTarget, "postcopy_failed", 0)
}

func TestDeadlineAbortKeepsTheDriversReason(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, f.now.Add(-time.Minute), api.ProxyInfo{MigrationID: "m-1"},
		"migration failed: "+libvirtx.ErrMigrationDeadline.Error()+" of 5m0s; libvirt job aborted")
	f.stats(idle)
	f.ended(libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut, ErrMsg: "canceled by client"},
		nil, libvirtx.StateRunning, 1, nil)
	if j := f.wantPhase(api.PhaseAborted); !strings.Contains(j.FailureReason, "deadline") {
		t.Fatalf("reason %q does not say the deadline aborted it", j.FailureReason)
	}
}

func TestAnOlderCompletedRecordIsNotThisJobsOutcome(t *testing.T) {
	f := newFeed(t, "a")
	s := outgoing(4, 300)
	s.TimeElapsedMs = 20000
	f.stats(s)
	f.stats(idle)
	// An earlier, shorter migration's cancel is still kept by libvirt.
	old := libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut, TimeElapsedMs: 2000}
	f.ended(old, nil, libvirtx.StateRunning, 1, nil)
	if j := f.wantPhase(api.PhaseFailed); !strings.Contains(j.FailureReason, "kept no statistics") {
		t.Fatalf("reason %q", j.FailureReason)
	}
}

func TestAnOlderListingDoesNotUndoAnEvent(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	asked := f.tick()
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	f.tr.apply(input{kind: inList, socket: sock, at: asked, got: f.tick(), list: []libvirtx.Domain{paused(libvirtx.PausedPostCopy)}})
	doms := f.tr.Domains()
	if len(doms) != 1 || doms[0].AttentionReason != "postcopy_failed" {
		t.Fatalf("an older listing put back an older state: %+v", doms)
	}
}
