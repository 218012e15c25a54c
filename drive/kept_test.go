package drive

import (
	"testing"
)

// A definition a source keeps for a guest its target runs without one is
// the guest's own when it comes back from that node, and no other's.
func TestADefinitionKeptForAGuestIsItsOwnFromWhereItWent(t *testing.T) {
	dir := t.TempDir()
	const uuid = "7c3a2c5e-2b36-4a7b-9d8e-0a4c1b2e3f40"
	rec := drivenRecord{Domain: "vm", UUID: uuid, TargetNode: "b"}
	const def = "5e1f"
	if keptFor(dir, uuid, "b", def) {
		t.Fatal("kept before it was noted")
	}
	if err := noteKept(dir, rec, def); err != nil {
		t.Fatal(err)
	}
	if !keptFor(dir, uuid, "b", def) {
		t.Error("the definition kept for the guest that left for b is not its own when it comes back from b")
	}
	if keptFor(dir, uuid, "c", def) || keptFor(dir, uuid, "", def) {
		t.Error("a definition kept for the guest that left for b is adopted by another node's migration")
	}
	if keptFor(dir, uuid, "b", "a7c0") || keptFor(dir, uuid, "b", "") {
		t.Error("a definition changed since it was kept (started, redefined) counts as kept")
	}
	if keptFor(dir, "0b6c2b7a-9d1e-4c3f-8a5b-7e2d1f0c9a31", "b", def) {
		t.Error("another guest's definition counts as kept")
	}
	forgetKept(dir, uuid)
	if keptFor(dir, uuid, "b", def) {
		t.Error("still kept once the guest is back")
	}
	if err := noteKept(dir, drivenRecord{Domain: "vm", UUID: "../../etc/passwd", TargetNode: "b"}, def); err != nil || keptFor(dir, "../../etc/passwd", "b", def) {
		t.Errorf("a UUID that is a path was noted: %v", err)
	}
}
