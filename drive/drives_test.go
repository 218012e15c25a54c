package drive

import (
	"testing"

	"github.com/ferry-vm/ferry/peer"
)

// An operator's decision reaches only a migration in doubt, on the socket
// named when two serve the domain.
func TestAnOperatorDecidesOnlyAMigrationInDoubt(t *testing.T) {
	ds := newDrives()
	vm, pod := driveKey("/run/libvirt/libvirt-sock", "vm"), driveKey("/pods/x/virtqemud-sock", "vm")
	ds.start(vm)
	ds.start(pod)
	if _, ok := ds.decide("", "vm", peer.OutcomeRunning); ok {
		t.Fatal("a decision reached a migration not in doubt")
	}
	ds.doubt(vm)
	ds.doubt(pod)
	if _, ok := ds.decide("", "vm", peer.OutcomeRunning); ok {
		t.Fatal("a decision by name alone reached one of two migrations of that name")
	}
	key, ok := ds.decide("/run/libvirt/libvirt-sock", "vm", peer.OutcomeStopped)
	if !ok || key != vm {
		t.Fatalf("decide on the named socket: %q, %v", key, ok)
	}
	select {
	case got := <-ds.decisions(vm):
		if got != peer.OutcomeStopped {
			t.Fatalf("the migration heard %q", got)
		}
	default:
		t.Fatal("the decision never reached the migration")
	}
	select {
	case got := <-ds.decisions(pod):
		t.Fatalf("the other socket's migration heard %q", got)
	default:
	}
	ds.end(vm)
	if _, ok := ds.decide("/run/libvirt/libvirt-sock", "vm", peer.OutcomeStopped); ok {
		t.Fatal("a decision reached a migration that ended")
	}
}
