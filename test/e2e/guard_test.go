//go:build e2e

package e2e

import (
	"testing"

	"github.com/ferry-vm/ferry/test/testbed"
)

// Node b's state dir turns read-only (a full or read-only disk) between
// a's Perform and the finish, the guest paused whole on both nodes and
// never run on b: b cannot keep the finish's guard record (what a
// restarted b would answer a's question with), so it does not finish. It
// drops its copy, and the guest runs on a alone, whole, one QEMU on the
// machine. (Before, the guard was best-effort: b ran the guest with no
// record of it, and after a restart of b's ferryd and a stop of the guest
// there a would have resumed its older copy of a guest that ran on b.)
func TestATargetThatCannotKeepItsFinishRecordDoesNotFinish(t *testing.T) {
	const name = "rostate"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	before, done := migrationHeldBeforeFinish(t, name)
	restore, err := bed.ReadOnlyStateDir("b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Errorf("making b's state dir writable again: %v", err)
		}
	})
	if err := <-done; err == nil {
		t.Fatal("the migration completed to a node that could not keep its finish's record")
	} else {
		t.Logf("the migration failed, as it must: %v", err)
	}
	onlyOn(t, name, "a", "b")
	memoryIntact(t, name, before)
	oneQEMU(t, name)
}
