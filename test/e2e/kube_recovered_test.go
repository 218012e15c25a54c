//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/testbed"
)

// libvirt on the target reports the post-copy failed and, the guest still
// split past its grace, its ferryd marks the VMI irrecoverable, as it does
// for a migration nobody resumes; then the migration completes after all
// (here the source resumes it once the link is back). Nobody must give up
// on a guest that runs: the mark comes off, with an Event.
func TestAVMIMarkedIrrecoverableLosesTheMarkWhenItsPostCopyCompletes(t *testing.T) {
	kubeUp(t)
	const name = "pcback"
	uid := createVMI(t, name)
	// The target declares the failure, as for KubeVirt's own migrations;
	// the source, driving it, resumes it.
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
	// Broken at once on both nodes (a cut link alone leaves the target's
	// QEMU waiting on its stream), and kept from being resumed past the
	// target's grace for a mark.
	if err := bed.ResetMigration(); err != nil {
		t.Fatalf("reset-migration: %v", err)
	}
	if err := bed.CutLink(); err != nil {
		t.Fatal(err)
	}
	defer bed.RestoreLink()
	cut := time.Now()
	at := waitFor(t, "the VMI marked irrecoverable by the target", time.Minute, func() bool {
		ok, _ := marked(t, getVMI(t, name))
		return ok
	})
	t.Logf("marked by the target %v after the cut", at.Sub(cut).Round(time.Second))
	if err := bed.RestoreLink(); err != nil {
		t.Fatal(err)
	}
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
	waitFor(t, "an IrrecoverableMarkRemoved Event", 10*time.Second, func() bool { return vmiEvents(t, name, "IrrecoverableMarkRemoved", "Normal") == 1 })
	t.Logf("the mark came off %v after the migration ended", unmarkedAt.Sub(ended).Round(time.Millisecond))
	onlyOn(t, "default_"+name, "b", "a")
	memoryIntact(t, "default_"+name, r.before)
}

// A post-copy Ferry drives for a KubeVirt VMI breaks and is resumed: while
// it is, the VMI says so (an annotation kept current, an Event for each
// change), never the irrecoverable mark; once it completes the annotation
// goes, with an Event.
func TestAVMIShowsItsPostCopyRecoveryNotTheIrrecoverableMark(t *testing.T) {
	kubeUp(t)
	const name = "pcrec"
	uid := createVMI(t, name)
	r := breakable(t, testbed.GuestSpec{Name: "default_" + name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 4, VMIUID: uid, Verify: true})
	if err := bed.ResetMigration(); err != nil {
		t.Fatalf("reset-migration: %v", err)
	}
	var shown kubevirt.RecoveryState
	waitFor(t, "the recovery annotation", 30*time.Second, func() bool {
		a, ok := getVMI(t, name).GetAnnotations()[kubevirt.RecoveryAnnotation]
		return ok && json.Unmarshal([]byte(a), &shown) == nil
	})
	if shown.Node != "a" || shown.Until.IsZero() || (shown.State != "paused" && shown.State != "resumed") {
		t.Errorf("recovery annotation %+v", shown)
	}
	resumedToTheEnd(t, r, 1)
	waitFor(t, "the recovery annotation taken off", 30*time.Second, func() bool {
		_, ok := getVMI(t, name).GetAnnotations()[kubevirt.RecoveryAnnotation]
		return !ok
	})
	for reason, typ := range map[string]string{"PostCopyPaused": "Warning", "PostCopyResumed": "Normal", "PostCopyRecovered": "Normal"} {
		if n := vmiEvents(t, name, reason, typ); n != 1 {
			t.Errorf("%d %s Events, want one", n, reason)
		}
	}
	if ok, _ := marked(t, getVMI(t, name)); ok || postCopyEvents(t, name) != 0 {
		t.Errorf("a VMI whose post-copy was resumed was marked irrecoverable")
	}
}
