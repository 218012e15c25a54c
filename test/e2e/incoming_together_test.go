//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// Two guests migrate into b at once, the second prepared while the first
// is still coming. b's prepare checks that the second names no file of
// any guest there, the first included; libvirt 11.3 answers no call for
// the first guest's XML until its migration is over, so b takes its files
// from the XML it checked and prepared it with. Both complete, each whole.
// (Before, b's check waited on the first guest's XML past its call
// timeout and refused the second migration: "libvirt did not answer in
// time".)
func TestAGuestPreparedWhileAnotherComesInCompletes(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "first", MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 4, Verify: true})
	guest(t, testbed.GuestSpec{Name: "second", MemoryMiB: 128, DirtyMiB: 32, DirtyRateMiBs: 4, Verify: true})
	before := verifiedSoFar(t, "second")
	first := migrateAsync(t, testbed.MigrateSpec{Name: "first", From: "a", To: "b", Via: "ferry", BandwidthMiBs: 16})
	waitFor(t, "the first guest coming into b", time.Minute, func() bool {
		return ferrydLogLine("b", `"domain":"first"`, "incoming migration prepared")
	})
	time.Sleep(2 * time.Second) // well into its transfer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: "second", From: "a", To: "b", Via: "ferry"}); err != nil {
		t.Fatalf("a migration prepared on b while another came in: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first migration: %v", err)
	}
	onlyOn(t, "second", "b", "a")
	onlyOn(t, "first", "b", "a")
	memoryIntact(t, "second", before)
}
