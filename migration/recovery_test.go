package migration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// drivenPostCopy is a source job of a post-copy Ferry drives and resumes
// for up to recoverFor, switched to post-copy.
func drivenPostCopy(t *testing.T, recoverFor time.Duration) *feed {
	f := newFeed(t, "a")
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1", Target: "10.0.0.2:9475", TLS: true, TargetNode: "b"})
	driverOf(f.tr).DriveRecoverable(sock, dom.Name, recoverFor)
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	return f
}

func TestABrokenDrivenPostCopyPausesInsteadOfFailing(t *testing.T) {
	f := drivenPostCopy(t, 5*time.Minute)
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	j := f.wantPhase(api.PhasePostCopyPaused)
	if j.Recovery == nil || time.Until(j.Recovery.Until) < 4*time.Minute {
		t.Fatalf("recovery %+v, want one ending about 5 minutes from now", j.Recovery)
	}
	f.list(paused(libvirtx.PausedPostCopyFailed))
	f.wantJobs(1, 1)
	f.wantTotal(api.RoleSource, "postcopy_failed", 0)
	doms := f.tr.Domains()
	if len(doms) != 1 || doms[0].AttentionReason != "postcopy_paused" {
		t.Fatalf("a paused post-copy flagged as %+v, want postcopy_paused (not failed: it is being resumed)", doms)
	}
	// An attempt that fails, then one whose stream runs again: libvirt
	// shows the source paused in post-copy, and the job runs again.
	f.tr.Books().DriveRecoveryAttempt(sock, dom.Name, 1, errors.New("asking the target: refused"))
	f.tr.Books().DriveResumed(sock, dom.Name, 2, 200*time.Millisecond)
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	if j := f.wantPhase(api.PhaseRunning); j.Recovery.Attempts != 2 || j.Recovery.Resumed != 1 || j.Recovery.LastError == "" {
		t.Fatalf("recovery %+v, want 2 attempts, 1 resumed, the last error", j.Recovery)
	}
	// It breaks again, and completes after a second resume.
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyPaused)
	f.tr.Books().DriveResumed(sock, dom.Name, 3, 100*time.Millisecond)
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedMigrated)
	j = f.wantPhase(api.PhaseCompleted)
	if j.Recovery.Resumed != 2 {
		t.Fatalf("recovery %+v, want 2 resumed", j.Recovery)
	}
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, j.StartTime, api.ProxyInfo{MigrationID: "m-1"}, "")
	f.wantTotal(api.RoleSource, "completed", 1)
	f.wantTotal(api.RoleSource, "postcopy_failed", 0)
	s := f.tr.Snapshot()
	if s.RecoveryAttempts[RecoveryResumed] != 2 || s.RecoveryAttempts[RecoveryFailed] != 1 {
		t.Fatalf("attempts %v, want 2 resumed and 1 failed", s.RecoveryAttempts)
	}
}

func TestAPausedPostCopyTheDriverGivesUpOnFailsOnce(t *testing.T) {
	f := drivenPostCopy(t, 5*time.Minute)
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	j := f.wantPhase(api.PhasePostCopyPaused)
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, j.StartTime, api.ProxyInfo{MigrationID: "m-1"}, "post-copy broke and was not resumed within 5m0s")
	j = f.wantPhase(api.PhasePostCopyFailed)
	if !strings.Contains(j.FailureReason, "not resumed within") {
		t.Fatalf("reason %q", j.FailureReason)
	}
	// libvirt's later word on the same failure records nothing more.
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	f.list(paused(libvirtx.PausedPostCopyFailed))
	f.wantJobs(0, 1)
	f.wantTotal(api.RoleSource, "postcopy_failed", 1)
}

// A target past its time shows the pause overdue and holds it: the
// source may still be trying over a cut link. Only an operator ends it.
func TestAPausedPostCopyNobodyResumesIsOverdueOnTheTargetUntilAnOperatorGivesUp(t *testing.T) {
	grace := recoveryGrace
	recoveryGrace = 10 * time.Millisecond
	t.Cleanup(func() { recoveryGrace = grace })
	f := newFeed(t, "b")
	driverOf(f.tr).ExpectIncoming(sock, dom.Name, "m-t", "a")
	driverOf(f.tr).IncomingRecoverable(sock, dom.Name, "m-t", 10*time.Millisecond)
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopy)
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyPaused)
	deadline := time.Now().Add(5 * time.Second)
	for {
		j, _ := f.tr.Job(dom.Name)
		if j.Recovery != nil && j.Recovery.Overdue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the paused job never showed overdue")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	f.wantPhase(api.PhasePostCopyPaused)
	if f.tr.Books().IncomingGiveUp("", "other") {
		t.Fatal("gave up a domain that is not paused here")
	}
	if !f.tr.Books().IncomingGiveUp("", dom.Name) {
		t.Fatal("an operator could not give up the paused incoming post-copy")
	}
	j := f.wantPhase(api.PhasePostCopyFailed)
	if !strings.Contains(j.FailureReason, "ferryctl give-up") {
		t.Fatalf("reason %q", j.FailureReason)
	}
}

func TestTheDriverSaysWhenASourcesRecoveryIsOverdue(t *testing.T) {
	f := drivenPostCopy(t, time.Minute)
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyPaused)
	f.tr.Books().DriveRecoveryOverdue(sock, dom.Name)
	if j := f.wantPhase(api.PhasePostCopyPaused); !j.Recovery.Overdue {
		t.Fatal("not overdue after the driver said so")
	}
	// A new pause (it resumed, and broke again) has its own time.
	f.tr.Books().DrivePaused(sock, dom.Name, time.Now().Add(time.Minute))
	if j := f.wantPhase(api.PhasePostCopyPaused); j.Recovery.Overdue {
		t.Fatal("still overdue after a new pause")
	}
}

// A source's pause has no clock of its own: its driver moves the deadline
// and ends it.
func TestAPausedSourceWaitsForItsDriver(t *testing.T) {
	grace := recoveryGrace
	recoveryGrace = 10 * time.Millisecond
	t.Cleanup(func() { recoveryGrace = grace })
	f := drivenPostCopy(t, 10*time.Millisecond)
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyPaused)
	time.Sleep(200 * time.Millisecond)
	f.wantPhase(api.PhasePostCopyPaused)
}

func TestAPostCopyNotResumedFailsAtOnce(t *testing.T) {
	f := drivenPostCopy(t, 0)
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyFailed)
}

func TestATargetOfARecoverablePostCopyPauses(t *testing.T) {
	f := newFeed(t, "b")
	driverOf(f.tr).ExpectIncoming(sock, dom.Name, "m-t", "a")
	driverOf(f.tr).IncomingRecoverable(sock, dom.Name, "m-t", 5*time.Minute)
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopy)
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyPaused)
	f.list(running(libvirtx.RunningPostCopy))
	f.wantPhase(api.PhaseRunning)
	f.list(running(libvirtx.RunningMigrated))
	f.wantPhase(api.PhaseCompleted)
	f.wantTotal(api.RoleTarget, "postcopy_failed", 0)
}

// A post-copy recorded failed that runs again and completes is reported
// once, so its VMI mark comes off.
func TestAFailedPostCopyThatCompletesAfterAllIsReported(t *testing.T) {
	got := make(chan RecoveredDomain, 2)
	f := newFeed(t, "b")
	f.tr.cfg.OnRecovered = func(d RecoveredDomain) { got <- d }
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopy)
	f.lifecycle(libvirtx.EventResumed, libvirtx.ResumedPostCopyFailed)
	f.wantPhase(api.PhasePostCopyFailed)
	f.list(running(libvirtx.RunningPostCopyFailed))
	f.list(running(libvirtx.RunningPostCopy)) // resumed: still the same failure
	f.list(running(libvirtx.RunningMigrated))
	f.list(running(libvirtx.RunningMigrated))
	select {
	case d := <-got:
		if d.Domain != dom.Name || d.Namespace != "default" || d.Name != "vm1" {
			t.Fatalf("reported %+v", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a failed post-copy that completed was not reported")
	}
	select {
	case d := <-got:
		t.Fatalf("reported twice: %+v", d)
	case <-time.After(200 * time.Millisecond):
	}
	f.wantTotal(api.RoleTarget, "postcopy_failed", 1)
}
