package migration

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// timedFeed is a feed whose tracker hands its ended jobs' times to got.
func timedFeed(t *testing.T, node string) (*feed, *[]EndedTimes) {
	var got []EndedTimes
	f := newFeed(t, node)
	f.tr = NewTracker(Config{Node: node, OnTimes: func(e EndedTimes) { got = append(got, e) }})
	return f, &got
}

// final feeds what the sampler reads of an ended job's completed-job
// statistics.
func (f *feed) final(s libvirtx.JobStats, err error) {
	f.tr.apply(input{kind: inFinal, socket: sock, dom: f.dom, at: f.tick(), got: f.now, stats: s, err: err})
}

func completedOut(elapsedMs, downtimeMs uint64) libvirtx.JobStats {
	return libvirtx.JobStats{Type: libvirtx.JobCompleted, Operation: libvirtx.OperationMigrationOut, TimeElapsedMs: elapsedMs, DowntimeMs: downtimeMs}
}

func TestACompletedSourceIsTimedOnceFromLibvirtsRecord(t *testing.T) {
	f, got := timedFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.stats(outgoing(2, 10))
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	f.wantPhase(api.PhaseCompleted)
	if len(*got) != 0 {
		t.Fatalf("timed before libvirt's record was read: %+v", *got)
	}
	f.final(completedOut(2300, 42), nil)
	f.final(completedOut(2300, 42), nil)
	want := EndedTimes{Role: api.RoleSource, Result: "completed", Downtime: 42 * time.Millisecond, Duration: 2300 * time.Millisecond}
	if len(*got) != 1 || (*got)[0] != want {
		t.Fatalf("times %+v, want once %+v", *got, want)
	}
	if j := f.job(); j.DowntimeMs != 42 {
		t.Errorf("the job shows downtime %d ms, libvirt's record 42", j.DowntimeMs)
	}
}

// libvirt keeps the last completed record until another job completes: an
// older job's, or one of another outcome, is not this job's.
func TestAnotherJobsRecordIsNotTaken(t *testing.T) {
	f, got := timedFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.stats(outgoing(3, 10))
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	f.final(completedOut(900, 30), nil)
	failed := completedOut(5000, 0)
	failed.Type = libvirtx.JobFailed
	f.final(failed, nil)
	in := completedOut(5000, 30)
	in.Operation = libvirtx.OperationMigrationIn
	f.final(in, nil)
	f.final(libvirtx.JobStats{}, noDomain)
	f.final(libvirtx.JobStats{}, noDomain)
	f.final(completedOut(3100, 30), nil) // past the tries: given up
	if len(*got) != 0 {
		t.Fatalf("times taken from records not the job's own: %+v", *got)
	}
}

// A job ended by its completed-job statistics is timed from those; a field
// libvirt left out stays zero, never made up.
func TestAnAbortedSourceIsTimedFromTheRecordThatEndedIt(t *testing.T) {
	f, got := timedFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.stats(idle)
	done := libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut, TimeElapsedMs: 1700, ErrMsg: "operation aborted"}
	f.ended(done, nil, libvirtx.StateRunning, 1, nil)
	f.wantPhase(api.PhaseAborted)
	f.final(done, nil)
	want := EndedTimes{Role: api.RoleSource, Result: "aborted", Duration: 1700 * time.Millisecond}
	if len(*got) != 1 || (*got)[0] != want {
		t.Fatalf("times %+v, want once %+v", *got, want)
	}
}

func TestACompletedTargetIsTimed(t *testing.T) {
	f, got := timedFeed(t, "b")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.list(running(libvirtx.RunningMigrated))
	f.wantPhase(api.PhaseCompleted)
	f.final(libvirtx.JobStats{Type: libvirtx.JobCompleted, Operation: libvirtx.OperationMigrationIn, TimeElapsedMs: 4100, DowntimeMs: 250, DataProcessed: 64 << 20}, nil)
	want := EndedTimes{Role: api.RoleTarget, Result: "completed", Downtime: 250 * time.Millisecond, Duration: 4100 * time.Millisecond}
	if len(*got) != 1 || (*got)[0] != want {
		t.Fatalf("times %+v, want once %+v", *got, want)
	}
	if j := f.job(); j.DataProcessedBytes != 64<<20 {
		t.Errorf("the target's figures were not read: %+v", j)
	}
}
