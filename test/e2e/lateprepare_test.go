//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/test/testbed"
)

// libvirt answers the target's Prepare after ferryd stopped waiting for it
// (the fault cuts ferryd's wait to a millisecond; libvirt starts the
// target QEMU as usual, and answers late): the source hears the prepare
// refused, the late Prepare is undone on the connection that made it, so
// no QEMU is left on the target, and a retry migrates the guest.
func TestALatePrepareLeavesNoGuestOnTheTarget(t *testing.T) {
	const name = "lateprep"
	withFaults(t, "b", faults.LatePrepare)
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	before := verifiedSoFar(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"})
	if err == nil {
		t.Fatal("the guest migrated although the target gave up on its Prepare")
	}
	t.Logf("the first migration failed as it should: %v", err)
	var gone bool
	for end := time.Now().Add(time.Minute); time.Now().Before(end) && !gone; time.Sleep(250 * time.Millisecond) {
		there, err := readNodeTruth("b", name)
		if err != nil {
			t.Fatal(err)
		}
		gone = !there.Present
	}
	if !gone {
		there, _ := readNodeTruth("b", name)
		t.Fatalf("the late Prepare's guest is still on b: %s", there)
	}
	onlyOn(t, name, "a", "b")

	start := time.Now()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"}); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}
	endsWholeOn(t, name, "b", "a", before, start)
}
