//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"
)

// The target's libvirtd restarts during a post-copy Ferry drives, with
// recovery off: libvirt's Finish fails, but QEMU's stream never passed
// through libvirtd and goes on, and libvirt completes the migration by
// itself once it is back. Ferry's relays carry the stream until QEMU
// stops moving it, on both nodes: the guest ends whole on the target, one
// QEMU of it on the bed. Cutting the stream at the failed Finish would
// leave it split, with nothing to resume it.
func TestAPostCopyWhoseTargetLibvirtdRestartsIsNotCut(t *testing.T) {
	ferrydArgs(t, "--postcopy-recovery-timeout", "0")
	const name = "pc-tgt-restart"
	r := breakablePostCopy(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := bed.RestartLibvirtd(ctx, "b"); err != nil {
		t.Fatalf("restarting libvirtd on b: %v", err)
	}
	select {
	case err := <-r.done:
		t.Logf("the migration call returned: %v", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("the migration call did not return within 5 minutes")
	}
	var last string
	waitFor(t, "libvirt to complete the migration on both nodes", 4*time.Minute, func() bool {
		a, errA := readNodeTruth("a", name)
		b, errB := readNodeTruth("b", name)
		last = a.String() + " | " + b.String()
		return errA == nil && errB == nil && a.migratedAway() && b.migratedHere()
	})
	t.Logf("libvirt: %s", last)
	oneQEMU(t, name)
	endsWholeOn(t, name, "b", "a", r.before, r.start)
}
