package migration

import (
	"strings"
	"testing"

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
