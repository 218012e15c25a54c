package migration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// The driver's account of a migration is its job's alone: the next
// migration of the name, one Ferry does not drive (KubeVirt's, or an
// operator's virsh), neither names Ferry's proxy nor takes its failure,
// though the driver keeps the account a while after (drive.Books).
func TestTheNextMigrationOfTheNameDoesNotTakeTheDriversAccount(t *testing.T) {
	f := newFeed(t, "a")
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1", TargetNode: "b"})
	f.stats(outgoing(2, 300))
	const why = "the proxy's stream to b broke"
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, f.job().StartTime, api.ProxyInfo{MigrationID: "m-1", TargetNode: "b", Ended: true}, why)
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedFailed)
	if j := f.wantPhase(api.PhaseFailed); j.FailureReason != why || j.Proxy == nil {
		t.Fatalf("the driven job ended with %q, proxy %+v; want the driver's %q and its proxy", j.FailureReason, j.Proxy, why)
	}

	f.dom.ID++ // the guest started again, and migrates by other hands
	f.stats(outgoing(1, 400))
	if j := f.wantPhase(api.PhaseRunning); j.Proxy != nil || j.PeerNode != "" {
		t.Fatalf("the next migration names Ferry's proxy %+v, peer %q", j.Proxy, j.PeerNode)
	}
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedFailed)
	if j := f.wantPhase(api.PhaseFailed); j.FailureReason == why || !strings.Contains(j.FailureReason, "stopped during the migration") {
		t.Fatalf("the next migration ended with %q, want the tracker's own reason", j.FailureReason)
	}
}

// A migration a previous ferryd drove, settled since, is not the job
// running now when that job began after it: the settled account is not
// put on it.
func TestASettledAccountIsNotPutOnANewerJob(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	j := f.job()
	driverOf(f.tr).DriveSettled(sock, dom.Name, "", j.StartTime.Add(-settledJobWithin-1), api.ProxyInfo{MigrationID: "m-old"}, api.PhaseFailed, "settled: stopped")
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedFailed)
	if j := f.wantPhase(api.PhaseFailed); j.Proxy != nil || j.FailureReason == "settled: stopped" {
		t.Fatalf("the newer job took the settled account: proxy %+v, reason %q", j.Proxy, j.FailureReason)
	}
}

// After a restart the driver begins the account of a recorded post-copy
// (SettleRecorded) before it has settled it; the job ends (lost) first.
// The settled word still reaches that job: Completed, and counted once.
func TestASettledWordReachesAJobThatEndedBeforeIt(t *testing.T) {
	f := newFeed(t, "a")
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1", TargetNode: "b"})
	driverOf(f.tr).DriveRecoverable(sock, dom.Name, 5*time.Minute)
	f.stats(outgoing(4, 300))
	start := f.job().StartTime
	f.list()
	f.ended(notActive, noDomain, 0, 0, noDomain)
	f.wantPhase(api.PhaseLost)
	driverOf(f.tr).DriveSettled(sock, dom.Name, "", start, api.ProxyInfo{MigrationID: "m-1", Ended: true}, api.PhaseCompleted, "")
	f.wantPhase(api.PhaseCompleted)
	f.wantTotal(api.RoleSource, "completed", 1)
	f.wantTotal(api.RoleSource, "lost", 0)
}

// A settled end with no job to put it on makes one, and counts it.
func TestASettledEndWithNoJobIsCounted(t *testing.T) {
	f := newFeed(t, "a")
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1"})
	driverOf(f.tr).DriveRecoverable(sock, dom.Name, 5*time.Minute)
	driverOf(f.tr).DriveSettled(sock, dom.Name, "", time.Now(), api.ProxyInfo{MigrationID: "m-1", Ended: true}, api.PhaseFailed, "stopped")
	f.wantTotal(api.RoleSource, "failed", 1)
}

// A pod's libvirt ends the driven job, then starts a migration of its own
// before the driver's Perform returns: the driver's late word is the ended
// job's, never the pod's running one.
func TestALateDriversWordIsNotPutOnALaterJob(t *testing.T) {
	f := newFeed(t, "a")
	driverOf(f.tr).Drive(sock, dom.Name, api.ProxyInfo{MigrationID: "m-1", TargetNode: "b"})
	f.stats(outgoing(2, 300))
	start := f.job().StartTime
	f.lifecycle(libvirtx.EventStopped, libvirtx.StoppedFailed)
	f.wantPhase(api.PhaseFailed)
	f.dom.ID++
	f.stats(outgoing(1, 400)) // the pod's own migration
	driverOf(f.tr).DriveEnded(dom.Name, dom, sock, start, api.ProxyInfo{MigrationID: "m-1", TargetNode: "b", Ended: true}, "the proxy's stream to b broke")
	if j := f.wantPhase(api.PhaseRunning); j.Proxy != nil || j.PeerNode != "" {
		t.Fatalf("the pod's later job took migration m-1's account: proxy %+v, peer node %q", j.Proxy, j.PeerNode)
	}
	f.wantTotal(api.RoleSource, "failed", 1)
}

// The driver keeps nothing once the jobs that showed its accounts ended:
// not the driven migrations of launcher sockets that came and went, nor
// the prepares of incoming migrations that arrived under ever new names.
func TestTheDriverKeepsNothingOfMigrationsThatEnded(t *testing.T) {
	f := newFeed(t, "a")
	for i := 0; i < 20; i++ {
		s := fmt.Sprintf("/pods/p%d/virtqemud-sock", i)
		driverOf(f.tr).Drive(s, dom.Name, api.ProxyInfo{MigrationID: "m"})
		at := f.tick()
		f.tr.apply(input{kind: inStats, socket: s, dom: dom, at: at, got: at, stats: outgoing(1, 300)})
		at = f.tick()
		e := libvirtx.Event{Kind: libvirtx.KindLifecycle, Socket: s, Domain: dom, Event: libvirtx.EventStopped, Detail: libvirtx.StoppedMigrated, Time: at}
		f.tr.apply(input{kind: inLifecycle, socket: s, dom: dom, at: at, event: e})
		driverOf(f.tr).DriveEnded(dom.Name, dom, s, at, api.ProxyInfo{MigrationID: "m", Ended: true}, "")
		f.tr.apply(input{kind: inSocketGone, socket: s, at: f.tick(), why: "gone"})
	}
	in := newFeed(t, "b")
	for i := 0; i < 20; i++ {
		in.dom = libvirt.Domain{Name: fmt.Sprintf("default_x%d", i), UUID: libvirt.UUID{byte(i)}, ID: int32(10 + i)}
		driverOf(in.tr).ExpectIncoming(sock, in.dom.Name, fmt.Sprintf("m-%d", i), "a")
		in.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
		in.lifecycle(libvirtx.EventResumed, libvirtx.ResumedMigrated)
		in.wantPhase(api.PhaseCompleted)
	}
	if d, p := len(driverOf(f.tr).driving), len(driverOf(in.tr).preparing); d != 0 || p != 0 {
		t.Fatalf("the driver keeps %d accounts and %d prepares of migrations that ended", d, p)
	}
}
