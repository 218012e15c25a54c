package migration

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// TestTargetJobNamesThePreparingNode: the node that prepared an incoming
// migration, and the migration's id, are on its target job from the first
// moment, and not given to the next incoming job, one it did not prepare.
func TestTargetJobNamesThePreparingNode(t *testing.T) {
	f := newFeed(t, "b")
	driverOf(f.tr).ExpectIncoming(sock, dom.Name, "m-1", "a")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	if j := f.wantPhase(api.PhaseRunning); j.PeerNode != "a" || j.IncomingID != "m-1" {
		t.Fatalf("target job names peer node %q and migration %q, want a and m-1", j.PeerNode, j.IncomingID)
	}
	f.list(running(libvirtx.RunningMigrated))
	if j := f.wantPhase(api.PhaseCompleted); j.PeerNode != "a" || j.IncomingID != "m-1" {
		t.Fatalf("finished target job names peer node %q and migration %q, want a and m-1", j.PeerNode, j.IncomingID)
	}
	if j := f.nextIncoming(); j.PeerNode != "" || j.IncomingID != "" {
		t.Fatalf("the prepare outlives its job: the next incoming migration names peer %q, migration %q", j.PeerNode, j.IncomingID)
	}
}

// TestSourceJobNamesTheAnsweringNode: the driver's account names the
// target node, and the job shows it as its peer.
func TestSourceJobNamesTheAnsweringNode(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	driverOf(tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1", Target: "10.0.0.2:9475", TLS: true, TargetNode: "b"})
	tr.mu.Lock()
	j := tr.newJob(sock, dom, api.RoleSource, time.Now(), "test")
	tr.mu.Unlock()
	if j.view.PeerNode != "b" || j.view.Proxy.TargetNode != "b" {
		t.Fatalf("source job names peer node %q, proxy %+v; want b", j.view.PeerNode, j.view.Proxy)
	}
}

// TestALateEndKeepsTheNextPrepare: the next migration of the domain was
// prepared before this job's end was seen; its id is not forgotten with
// the old job, and the old job keeps its own.
func TestALateEndKeepsTheNextPrepare(t *testing.T) {
	f := newFeed(t, "b")
	driverOf(f.tr).ExpectIncoming(sock, dom.Name, "m-1", "a")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.wantPhase(api.PhaseRunning)
	driverOf(f.tr).ExpectIncoming(sock, dom.Name, "m-2", "a")
	f.list(running(libvirtx.RunningMigrated))
	if j := f.wantPhase(api.PhaseCompleted); j.IncomingID != "m-1" {
		t.Fatalf("the ended job names migration %q, want m-1", j.IncomingID)
	}
	if next := f.nextIncoming(); next.IncomingID != "m-2" {
		t.Fatalf("the next incoming job names migration %q after the old job's end, want m-2", next.IncomingID)
	}
}

// TestAnOlderJobDoesNotTakeTheNextPrepare: a target job that was running
// before a prepare (a migration ferryd did not prepare, or one from before
// its restart) neither takes the new migration's id nor forgets it at its
// end.
func TestAnOlderJobDoesNotTakeTheNextPrepare(t *testing.T) {
	f := newFeed(t, "b")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.wantPhase(api.PhaseRunning)
	driverOf(f.tr).ExpectIncoming(sock, dom.Name, "m-2", "a")
	f.list(running(libvirtx.RunningMigrated))
	if j := f.wantPhase(api.PhaseCompleted); j.IncomingID != "" || j.PeerNode != "" {
		t.Fatalf("the older job took the new prepare: migration %q, peer %q", j.IncomingID, j.PeerNode)
	}
	if next := f.nextIncoming(); next.IncomingID != "m-2" || next.PeerNode != "a" {
		t.Fatalf("the new migration's job names migration %q, peer %q after the older job's end, want m-2 and a", next.IncomingID, next.PeerNode)
	}
}

// nextIncoming starts the domain's next incoming migration job, the last
// one having ended, and returns it.
func (f *feed) nextIncoming() api.Job {
	f.t.Helper()
	f.list()   // the guest left again
	f.dom.ID++ // and comes back in a QEMU of its own
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	return f.wantPhase(api.PhaseRunning)
}

// A prepare is the target job's only on the socket it was made on: a
// namesake's incoming job on another libvirt (a pod's) does not take it.
func TestAPrepareIsTakenOnlyOnItsSocket(t *testing.T) {
	f := newFeed(t, "b")
	driverOf(f.tr).ExpectIncoming("/pods/x/virtqemud-sock", dom.Name, "m-1", "a")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	if j := f.wantPhase(api.PhaseRunning); j.PeerNode != "" || j.IncomingID != "" {
		t.Fatalf("a target job on %s took another socket's prepare: peer %q, migration %q", sock, j.PeerNode, j.IncomingID)
	}
}

// A restarted ferryd whose tracker saw the driven migration's libvirt job
// end by itself still gives that job the driver's account: the migration
// it names, and why it ended. So too for one still running when settled.
func TestASettledDriveNamesTheJobThisProcessSaw(t *testing.T) {
	d := libvirtx.Domain{Ref: dom, Name: dom.Name, State: libvirtx.StateRunning}
	for _, ended := range []bool{true, false} {
		tr := NewTracker(Config{Node: "a"})
		start := time.Now().Add(-time.Minute)
		tr.feedDomains(sock, []libvirtx.Domain{d}, start)
		tr.feedStats(sock, d, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, TimeElapsedMs: 60000,
			DataTotal: 1 << 30, DataRemaining: 1 << 29, MemoryIteration: 2}, time.Now())
		if ended {
			tr.feedEnded(sock, d, libvirtx.JobStats{}, time.Now())
		}
		why := "ferryd restarted during the migration; the target dropped its copy"
		driverOf(tr).DriveSettled(sock, dom.Name, libvirtx.UUIDString(dom.UUID), start, api.ProxyInfo{MigrationID: "m-0123456789abcdef"}, api.PhaseFailed, why)
		if !ended {
			tr.feedEnded(sock, d, libvirtx.JobStats{}, time.Now())
		}
		js := tr.Jobs(true)
		if len(js) != 1 || js[0].Proxy == nil || js[0].Proxy.MigrationID != "m-0123456789abcdef" || js[0].FailureReason != why {
			t.Fatalf("ended before the settling %v: jobs %+v, want one naming the migration and why", ended, js)
		}
	}
}

// A settled drive's account goes to its own guest's job only: not to a job
// of another guest given the name since, nor to a target job.
func TestASettledDriveLeavesOtherJobsAlone(t *testing.T) {
	d := libvirtx.Domain{Ref: dom, Name: dom.Name, State: libvirtx.StateRunning}
	tr := NewTracker(Config{Node: "a"})
	start := time.Now().Add(-time.Minute)
	tr.feedDomains(sock, []libvirtx.Domain{d}, start)
	tr.feedStats(sock, d, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, TimeElapsedMs: 60000,
		DataTotal: 1 << 30, DataRemaining: 1 << 29, MemoryIteration: 2}, time.Now())
	tr.feedEnded(sock, d, libvirtx.JobStats{}, time.Now())
	driverOf(tr).DriveSettled(sock, dom.Name, "another-guest-uuid", start, api.ProxyInfo{MigrationID: "m-0123456789abcdef"}, api.PhaseFailed, "ferryd restarted")
	for _, j := range tr.Jobs(true) {
		if j.Proxy != nil || strings.Contains(j.FailureReason, "ferryd restarted") {
			t.Fatalf("another guest's job took the settled drive's account: %+v", j)
		}
	}
}
