//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/testbed"
)

// libvirt on the target reports the post-copy failed and its ferryd marks
// the VMI irrecoverable, as it does for a migration nobody resumes; then
// the migration completes after all (here the source resumes it). Nobody
// must give up on a guest that runs: the mark comes off, with an Event.
func TestAVMIMarkedIrrecoverableLosesTheMarkWhenItsPostCopyCompletes(t *testing.T) {
	kubeUp(t)
	const name = "pcback"
	uid := createVMI(t, name)
	// The target declares the failure at once, as for KubeVirt's own
	// migrations; the source, driving it, resumes it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.SetNodeFerrydArgs(ctx, "b", "--postcopy-recovery-timeout", "0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bed.SetNodeFerrydArgs(ctx, "b")
	})
	r := breakable(t, testbed.GuestSpec{Name: "default_" + name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 4, VMIUID: uid, Verify: true})
	if err := bed.ResetMigration(); err != nil {
		t.Fatalf("reset-migration: %v", err)
	}
	waitFor(t, "the VMI marked irrecoverable by the target", 30*time.Second, func() bool {
		ok, _ := marked(t, getVMI(t, name))
		return ok
	})
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("the migration did not complete: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the migration did not end")
	}
	ended := time.Now()
	unmarkedAt := waitFor(t, "the mark taken off", 30*time.Second, func() bool {
		u := getVMI(t, name)
		_, ann := u.GetAnnotations()[kubevirt.FailureAnnotation]
		ok, _ := marked(t, u)
		return !ok && !ann
	})
	waitFor(t, "a PostCopyRecovered Event", 10*time.Second, func() bool { return vmiEvents(t, name, "PostCopyRecovered", "Normal") == 1 })
	t.Logf("the mark came off %v after the migration ended", unmarkedAt.Sub(ended).Round(time.Millisecond))
	onlyOn(t, "default_"+name, "b", "a")
	memoryIntact(t, "default_"+name, r.before)
}
