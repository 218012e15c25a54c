//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// The target's libvirtd restarts during a post-copy Ferry drives, with
// recovery off: libvirt's Finish fails, but QEMU's stream never passed
// through libvirtd and goes on, and libvirt completes the migration by
// itself once it is back. Ferry's relays carry the stream until QEMU
// stops moving it, on both nodes: the guest ends whole on the target, one
// QEMU of it on the bed. Cutting the stream at the failed Finish would
// leave it split, with nothing to resume it. The guest is a KubeVirt
// VMI's: libvirt on the target calls the post-copy failed for a while,
// and no node marks the VMI irrecoverable for a guest that completes.
func TestAPostCopyWhoseTargetLibvirtdRestartsIsNotCut(t *testing.T) {
	kubeUp(t)
	ferrydArgs(t, "--postcopy-recovery-timeout", "0")
	const vmi, name = "pctgtrestart", "default_pctgtrestart"
	uid := createVMI(t, vmi)
	r := breakable(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 4, VMIUID: uid, Verify: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := bed.RestartLibvirtd(ctx, "b"); err != nil {
		t.Fatalf("restarting libvirtd on b: %v", err)
	}
	restarted := time.Now()
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
	// Past the target's grace for a mark (30 s from libvirt's word).
	time.Sleep(time.Until(restarted.Add(40 * time.Second)))
	if ok, _ := marked(t, getVMI(t, vmi)); ok {
		t.Error("the VMI was marked irrecoverable though its post-copy completed")
	}
	if n := postCopyEvents(t, vmi); n != 0 {
		t.Errorf("%d PostCopyFailed events for a post-copy that completed", n)
	}
}
