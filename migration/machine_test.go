package migration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// Each test here is a situation the tracker once recorded wrongly.

func TestSourceQEMUKilledIsFailedNeverCompleted(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(2, 300))
	// QEMU died: libvirt says stopped/failed (or crashed).
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedFailed)
	if j := f.wantPhase(api.PhaseFailed); !strings.Contains(j.FailureReason, "stopped during the migration") {
		t.Fatalf("reason %q", j.FailureReason)
	}
	f.wantTotal(api.RoleSource, "completed", 0)
}

func TestSourceGoneFromListWaitsForItsEvent(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(2, 300))
	// The listing can show the domain gone before its event is read.
	acts := f.list()
	if !hasAction(acts, settleLater) {
		t.Fatalf("a vanished domain must be settled later, got %+v", acts)
	}
	f.wantPhase(api.PhaseRunning)
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedCrashed)
	f.wantPhase(api.PhaseFailed)
	f.wantTotal(api.RoleSource, "completed", 0)
}

func TestSourceGoneWithoutEventIsLostNotCompleted(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(2, 300))
	f.list()
	// A transient domain leaves nothing to ask.
	f.ended(notActive, noDomain, 0, 0, noDomain)
	j := f.wantPhase(api.PhaseLost)
	if !strings.Contains(j.FailureReason, "without a lifecycle event") {
		t.Fatalf("reason %q", j.FailureReason)
	}
	f.wantTotal(api.RoleSource, "completed", 0)
	f.wantTotal(api.RoleSource, "lost", 1)
}

func TestPersistentSourceGoneSettlesFromItsState(t *testing.T) {
	for _, tc := range []struct {
		reason int32
		want   api.Phase
	}{{libvirtx.ShutoffMigrated, api.PhaseCompleted}, {3 /* crashed */, api.PhaseFailed}, {2 /* destroyed */, api.PhaseFailed}} {
		f := newFeed(t, "a")
		f.stats(outgoing(2, 300))
		f.list()
		f.ended(notActive, nil, libvirtx.StateShutoff, tc.reason, nil)
		f.wantPhase(tc.want)
	}
}

func TestTargetQEMUKilledIsFailed(t *testing.T) {
	f := newFeed(t, "b")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedFailed)
	if j := f.wantPhase(api.PhaseFailed); !strings.Contains(j.FailureReason, "incoming migration failed") {
		t.Fatalf("reason %q", j.FailureReason)
	}
}

func TestSocketGoneEndsItsJobsAsLost(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(2, 300))
	other := libvirtx.Event{Kind: libvirtx.KindLifecycle, Socket: "/other", Domain: dom, Event: libvirtx.EventStarted,
		Detail: libvirtx.StartedMigrated, Time: f.tick()}
	f.tr.apply(input{kind: inLifecycle, socket: "/other", dom: dom, at: other.Time, event: other})
	f.tr.Lost(sock, fmt.Errorf("pod deleted: %w", libvirtx.ErrSocketGone))
	jobs := f.tr.Jobs(false)
	if len(jobs) != 1 || jobs[0].Socket != "/other" {
		t.Fatalf("in flight after the socket went away: %+v", jobs)
	}
	all := f.tr.Jobs(true)
	if all[1].Phase != api.PhaseLost || !strings.Contains(all[1].FailureReason, sock) {
		t.Fatalf("job of the gone socket: %s %q", all[1].Phase, all[1].FailureReason)
	}
	for _, d := range f.tr.Domains() {
		if d.Socket == sock {
			t.Fatalf("domain of a gone socket still listed: %+v", d)
		}
	}
	// A connection lost (libvirtd restarting) keeps jobs in flight.
	f.tr.Lost("/other", fmt.Errorf("libvirt closed the connection"))
	f.wantJobs(1, 2)
}

func TestLateIterationEventOpensNoPhantomJob(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(3, 100))
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	// The iteration event was sent before stopped/migrated but read after.
	acts := f.iteration(4)
	if !hasAction(acts, sample) {
		t.Fatal("an unknown iteration must be confirmed by a reading")
	}
	f.statsAsked(f.tick(), notActive, noDomain)
	f.wantJobs(0, 1)
	f.wantTotal(api.RoleSource, "completed", 1)
}

func TestStaleReadingAfterPostCopyFailedReopensNothing(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	asked := f.tick() // a scan asks for statistics...
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	f.statsAsked(asked, outgoing(2, 200), nil) // ...and its answer arrives after the event
	f.list(paused(libvirtx.PausedPostCopyFailed))
	f.stats(outgoing(2, 200)) // libvirt keeps the job active
	f.wantJobs(0, 1)
	f.wantTotal(api.RoleSource, "postcopy_failed", 1)
}

func TestPostCopyFailedSeenByScanThenEventIsOneFailure(t *testing.T) {
	f := newFeed(t, "b")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.list(running(libvirtx.RunningPostCopyFailed))
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopyFailed)
	f.list(running(libvirtx.RunningPostCopyFailed))
	f.wantJobs(0, 1)
	f.wantTotal(api.RoleTarget, "postcopy_failed", 1)
}

func TestStaleIdleReadingDoesNotEndARunningJob(t *testing.T) {
	f := newFeed(t, "a")
	asked := f.tick() // the scan asks before the migration starts...
	f.stats(outgoing(1, 400))
	if acts := f.statsAsked(asked, idle, nil); len(acts) != 0 { // ...and is answered late
		t.Fatalf("a stale idle reading asked for %+v", acts)
	}
	f.wantPhase(api.PhaseRunning)
}

func TestNewMigrationAfterAbortIsANewJob(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	f.stats(idle)
	f.ended(libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut}, nil, libvirtx.StateRunning, 1, nil)
	f.now = f.now.Add(5 * time.Second)
	s := outgoing(1, 400)
	s.TimeElapsedMs = 200
	f.stats(s)
	f.wantJobs(1, 2)
	f.wantPhase(api.PhaseRunning)
}

func TestSameDomainOnTwoSocketsAreTwoJobs(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	now := time.Now()
	for _, s := range []string{"/pod-a/sock", "/pod-b/sock"} {
		tr.apply(input{kind: inStats, socket: s, dom: dom, at: now, got: now, stats: outgoing(1, 300)})
	}
	if n := len(tr.Snapshot().Jobs); n != 2 {
		t.Fatalf("%d jobs, want one per socket", n)
	}
}

func TestPostCopyFailureCountedOnceAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	first := NewTracker(Config{Node: "a", StateDir: dir})
	now := time.Now()
	first.apply(input{kind: inStats, socket: sock, dom: dom, at: now, got: now, stats: outgoing(1, 300)})
	first.apply(input{kind: inList, socket: sock, at: now.Add(time.Second), list: []libvirtx.Domain{paused(libvirtx.PausedPostCopyFailed)}})
	if got := first.Snapshot().Count(api.RoleSource, "postcopy_failed"); got != 1 {
		t.Fatalf("first ferryd counted %d", got)
	}

	second := NewTracker(Config{Node: "a", StateDir: dir})
	second.apply(input{kind: inList, socket: sock, at: now.Add(2 * time.Second), list: []libvirtx.Domain{paused(libvirtx.PausedPostCopyFailed)}})
	all := second.Jobs(true)
	if len(all) != 1 || all[0].Phase != api.PhasePostCopyFailed || !strings.Contains(all[0].FailureReason, "before ferryd restarted") {
		t.Fatalf("after restart: %+v", all)
	}
	if got := second.Snapshot().Count(api.RoleSource, "postcopy_failed"); got != 0 {
		t.Fatalf("a restarted ferryd counted the same failure again (%d)", got)
	}

	// The operator recovers the guest; a later failure counts again.
	second.apply(input{kind: inList, socket: sock, at: now.Add(3 * time.Second), list: []libvirtx.Domain{running(1)}})
	third := NewTracker(Config{Node: "a", StateDir: dir})
	third.apply(input{kind: inList, socket: sock, at: now.Add(4 * time.Second), list: []libvirtx.Domain{paused(libvirtx.PausedPostCopyFailed)}})
	if got := third.Snapshot().Count(api.RoleSource, "postcopy_failed"); got != 1 {
		t.Fatalf("a new failure after recovery counted %d, want 1", got)
	}
}

func TestEventDetailsMapToTheirStates(t *testing.T) {
	// Stopped details are shutoff reasons shifted by one; a wrong shift
	// would read "migrated" as "crashed".
	st, rs, ok := eventState(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	if !ok || st != libvirtx.StateShutoff || libvirtx.ReasonName(st, rs) != "migrated" {
		t.Fatalf("stopped/migrated -> %s", stateName(st, rs))
	}
	st, rs, _ = eventState(libvirtx.EventStopped, libvirtx.StoppedFailed)
	if libvirtx.ReasonName(st, rs) != "failed" {
		t.Fatalf("stopped/failed -> %s", stateName(st, rs))
	}
	// After crashloaded the guest runs on: that crashed event implies no state.
	if _, _, ok := eventState(libvirtx.EventCrashed, 1); ok {
		t.Fatal("crashed/crashloaded must not end a migration")
	}
	if st, rs, _ := eventState(libvirtx.EventCrashed, libvirtx.CrashedPanicked); stateName(st, rs) != "crashed/panicked" {
		t.Fatalf("crashed/panicked -> %s", stateName(st, rs))
	}
}

// TestConcurrentInputs feeds the tracker from several goroutines at once,
// as the event loop, the scan and its per-domain reads do, while readers
// snapshot it; run with -race.
func TestConcurrentInputs(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := libvirt.Domain{Name: fmt.Sprintf("ns_vm%d", g), UUID: libvirt.UUID{byte(g)}, ID: int32(g + 1)}
			for i := 0; i < 200; i++ {
				at := start.Add(time.Duration(i) * time.Millisecond)
				tr.apply(input{kind: inStats, socket: sock, dom: d, at: at, got: at, stats: outgoing(uint64(1+i/20), 300)})
				ev := libvirtx.Event{Kind: libvirtx.KindIteration, Socket: sock, Domain: d, Iteration: int32(1 + i/20), Time: at}
				tr.apply(input{kind: inIteration, socket: sock, dom: d, at: at, event: ev})
			}
			end := start.Add(time.Second)
			ev := libvirtx.Event{Kind: libvirtx.KindLifecycle, Socket: sock, Domain: d, Event: libvirtx.EventStopped,
				Detail: libvirtx.StoppedMigrated, Time: end}
			tr.apply(input{kind: inLifecycle, socket: sock, dom: d, at: end, event: ev})
		}()
	}
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				tr.Snapshot()
				tr.Jobs(true)
				tr.Job("ns_vm1")
			}
		}()
	}
	wg.Wait()
	if got := tr.Snapshot().Count(api.RoleSource, "completed"); got != 8 {
		t.Fatalf("%d completed, want 8", got)
	}
	if n := len(tr.Jobs(false)); n != 0 {
		t.Fatalf("%d still in flight", n)
	}
}

// The driver's own connection saw its Confirm end the migration, the guest
// running on the target, while this node's monitoring connection missed
// how (cut while libvirtd froze): the job is completed, and counted so.
func TestADrivenSourceGoneUnseenIsCompletedOnTheDriversWord(t *testing.T) {
	for _, failure := range []string{"", "the target did not finish it: EOF"} {
		f := newFeed(t, "a")
		driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1"})
		f.stats(outgoing(2, 300))
		f.list()
		f.ended(notActive, noDomain, 0, 0, noDomain)
		f.wantPhase(api.PhaseLost)
		driverOf(f.tr).DriveEnded(dom.Name, dom, sock, f.now.Add(-time.Minute), api.ProxyInfo{MigrationID: "m-1", Ended: true}, failure)
		if failure != "" {
			// A failure the driver saw says nothing of where the guest is.
			f.wantPhase(api.PhaseLost)
			f.wantTotal(api.RoleSource, "lost", 1)
			continue
		}
		if j := f.wantPhase(api.PhaseCompleted); j.FailureReason != "" || j.ProgressPercent != 100 {
			t.Fatalf("completed job says %q at %v%%", j.FailureReason, j.ProgressPercent)
		}
		f.wantTotal(api.RoleSource, "lost", 0)
		f.wantTotal(api.RoleSource, "completed", 1)
	}
}
