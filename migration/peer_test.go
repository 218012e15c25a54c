package migration

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
)

// TestTargetJobNamesThePreparingNode: the node that prepared an incoming
// migration is on its target job from the first moment, and forgotten
// when the job ends.
func TestTargetJobNamesThePreparingNode(t *testing.T) {
	f := newFeed(t, "b")
	f.tr.ExpectIncoming(dom.Name, "a")
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	if j := f.wantPhase(PhaseRunning); j.PeerNode != "a" {
		t.Fatalf("target job names peer node %q, want a", j.PeerNode)
	}
	f.list(running(libvirtx.RunningMigrated))
	if j := f.wantPhase(PhaseCompleted); j.PeerNode != "a" {
		t.Fatalf("finished target job names peer node %q, want a", j.PeerNode)
	}
	f.tr.mu.Lock()
	left := f.tr.incoming[dom.Name]
	f.tr.mu.Unlock()
	if left != "" {
		t.Fatalf("the peer node %q outlives its job: the next incoming migration would name it", left)
	}
}

// TestSourceJobNamesTheAnsweringNode: the driver's account names the
// target node, and the job shows it as its peer.
func TestSourceJobNamesTheAnsweringNode(t *testing.T) {
	tr := NewTracker(Config{Node: "a"})
	tr.Drive(sock, dom.Name, ProxyInfo{MigrationID: "m-1", Target: "10.0.0.2:9475", TLS: true, TargetNode: "b"})
	tr.mu.Lock()
	j := tr.newJob(sock, dom, RoleSource, time.Now(), "test")
	tr.mu.Unlock()
	if j.view.PeerNode != "b" || j.view.Proxy.TargetNode != "b" {
		t.Fatalf("source job names peer node %q, proxy %+v; want b", j.view.PeerNode, j.view.Proxy)
	}
}
