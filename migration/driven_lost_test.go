package migration

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// With CHANGE_PROTECTION libvirt's job, and so the tracker's StartTime
// (estimated from its elapsed time), begins at Begin, before the target's
// Prepare, which may take seconds: the driver names its migration by the
// time of Begin, so that its account finds the job it lost sight of.
func TestALostDrivenJobBegunAtBeginIsCompleted(t *testing.T) {
	f := newFeed(t, "a")
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1"})
	f.stats(outgoing(4, 300))                               // libvirt's job began at Begin, 4 s ago
	begin := f.job().StartTime.Add(-500 * time.Millisecond) // the driver's record of Begin
	f.list()
	f.ended(notActive, noDomain, 0, 0, noDomain)
	f.wantPhase(api.PhaseLost)
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, begin, api.ProxyInfo{MigrationID: "m-1", Ended: true}, "")
	f.wantPhase(api.PhaseCompleted)
	f.wantTotal(api.RoleSource, "completed", 1)
}

// What acts on an ended job heard only that it was lost (daemon's
// reportVMI ignores Lost); completed on the driver's word after a
// post-copy recovery, the job is told again, so that the VMI's recovery
// mark can say it is over.
func TestALostJobCompletedByTheDriverIsToldAgain(t *testing.T) {
	ends := make(chan api.Job, 8)
	f := &feed{t: t, tr: NewTracker(Config{Node: "a", OnFinish: func(j api.Job) { ends <- j }}), dom: dom, now: time.Now()}
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1", TargetNode: "b"})
	driverOf(f.tr).DriveRecoverable(sock, dom.Name, 5*time.Minute)
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyPaused)
	f.tr.Books().DriveResumed(sock, dom.Name, 1, 100*time.Millisecond)
	// The resumed post-copy completes and libvirt removes the transient
	// domain while the monitoring connection is cut: no event.
	f.list()
	f.ended(notActive, noDomain, 0, 0, noDomain)
	j := f.wantPhase(api.PhaseLost)
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, j.StartTime, api.ProxyInfo{MigrationID: "m-1", Ended: true}, "")
	if j = f.wantPhase(api.PhaseCompleted); j.Recovery == nil {
		t.Fatal("no recovery on the job")
	}
	deadline := time.After(2 * time.Second)
	for {
		select {
		case e := <-ends:
			if e.Phase == api.PhaseCompleted {
				return
			}
			t.Logf("OnFinish got %s", e.Phase)
		case <-deadline:
			t.Fatal("OnFinish never saw the job Completed: reportVMI cannot clear the VMI's post-copy recovery annotation")
		}
	}
}

// The other order: the driver's own connection saw Confirm end the
// migration while this node's monitoring connection was held up (a frozen
// libvirtd); once it goes on, the domain is gone without an event. The
// job is the completed migration the driver said it was, not lost.
func TestADrivenJobLostAfterTheDriverSaidItCompletedIsCompleted(t *testing.T) {
	f := newFeed(t, "a")
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1"})
	f.stats(outgoing(4, 300))
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, f.job().StartTime, api.ProxyInfo{MigrationID: "m-1", Ended: true}, "")
	f.wantPhase(api.PhaseRunning)
	f.list()
	f.ended(notActive, noDomain, 0, 0, noDomain)
	f.wantPhase(api.PhaseCompleted)
	f.wantTotal(api.RoleSource, "completed", 1)
}

// A driver that said the migration failed is not taken for one that
// completed: the job lost stays lost.
func TestADrivenJobLostAfterTheDriverSaidItFailedStaysLost(t *testing.T) {
	f := newFeed(t, "a")
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1"})
	f.stats(outgoing(4, 300))
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, f.job().StartTime, api.ProxyInfo{MigrationID: "m-1", Ended: true}, "the target refused the finish")
	f.list()
	f.ended(notActive, noDomain, 0, 0, noDomain)
	f.wantPhase(api.PhaseLost)
}

// A migration a restarted ferryd settled with its target as completed is
// completed whichever of the settling and the loss comes first, with the
// settling as its evidence, counted once.
func TestADrivenJobSettledCompletedIsCompletedInEitherOrder(t *testing.T) {
	for _, settledFirst := range []bool{true, false} {
		f := newFeed(t, "a")
		f.stats(outgoing(4, 300))
		start := f.job().StartTime
		settle := func() {
			driverOf(f.tr).DriveSettled(sock, dom.Name, "", start, api.ProxyInfo{MigrationID: "m-1", Ended: true}, api.PhaseCompleted, "")
		}
		if settledFirst {
			settle()
		}
		f.list()
		f.ended(notActive, noDomain, 0, 0, noDomain)
		if !settledFirst {
			f.wantPhase(api.PhaseLost)
			settle()
		}
		j := f.wantPhase(api.PhaseCompleted)
		f.wantTotal(api.RoleSource, "completed", 1)
		f.wantTotal(api.RoleSource, "lost", 0)
		if !hasEvent(j, "driver", driverSettledIt) || hasEvent(j, "driver", driverSawCompletion) {
			t.Errorf("settled first %v: events %+v, want the settling as the evidence", settledFirst, j.Events)
		}
	}
}

func hasEvent(j api.Job, kind, detail string) bool {
	for _, e := range j.Events {
		if e.Kind == kind && e.Detail == detail {
			return true
		}
	}
	return false
}

// A driven migration over between two readings (libvirt's job shows that
// it migrates only from Perform, which may last less than an interval)
// is a completed job on the driver's word, counted once, with the proxy's
// account; the driver saying so again adds nothing.
func TestADrivenMigrationNoReadingSawIsCompletedOnTheDriversWord(t *testing.T) {
	f := newFeed(t, "a")
	begin := time.Now().Add(-2 * time.Second)
	info := api.ProxyInfo{MigrationID: "m-1", TargetNode: "b", Ended: true}
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1", TargetNode: "b"})
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, begin, info, "")
	j := f.wantPhase(api.PhaseCompleted)
	if j.Role != api.RoleSource || j.Proxy == nil || j.Proxy.MigrationID != "m-1" || j.PeerNode != "b" || !j.StartTime.Equal(begin) {
		t.Errorf("job %s from %s, proxy %+v, peer %q, started %v; want the driver's migration m-1 to b from %v", j.Role, j.Socket, j.Proxy, j.PeerNode, j.StartTime, begin)
	}
	f.wantTotal(api.RoleSource, "completed", 1)
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, begin, info, "")
	f.wantTotal(api.RoleSource, "completed", 1)
	if n := len(f.tr.Jobs(true)); n != 1 {
		t.Errorf("%d jobs after the driver's word came twice, want 1", n)
	}
}

// The driver may say a migration completed while libvirt here still holds
// its job (its Confirm still running in libvirtd when the driver, told by
// the target that the guest runs there, went on): the reading that then
// finds that job opens no second job of the one migration.
func TestLibvirtsJobStillHeldAfterTheDriversWordIsNoSecondJob(t *testing.T) {
	f := newFeed(t, "a")
	begin := time.Now().Add(-2 * time.Second)
	info := api.ProxyInfo{MigrationID: "m-1", TargetNode: "b", Ended: true}
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1", TargetNode: "b"})
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, begin, info, "")
	f.now = time.Now().Add(500 * time.Millisecond)
	f.stats(outgoing(2, 0)) // libvirt's job, begun at Begin 2 s ago
	f.list()
	f.ended(notActive, noDomain, 0, 0, noDomain)
	if n := len(f.tr.Jobs(true)); n != 1 {
		t.Errorf("%d jobs of one migration, want 1", n)
	}
	f.wantTotal(api.RoleSource, "completed", 1)
	f.wantTotal(api.RoleSource, "lost", 0)
}
