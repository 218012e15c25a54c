//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// migrationCapability is one of QEMU's migration capabilities on a node,
// as QEMU itself reports it through that node's libvirt.
func migrationCapability(node, domain, capability string) (bool, error) {
	var caps []struct {
		Capability string `json:"capability"`
		State      bool   `json:"state"`
	}
	if err := qemuAnswer(node, domain, "query-migrate-capabilities", &caps); err != nil {
		return false, err
	}
	for _, c := range caps {
		if c.Capability == capability {
			return c.State, nil
		}
	}
	return false, nil
}

// Post-copy with QEMU's preempt channel, through Ferry's one-port proxy.
// libvirt turns on postcopy-preempt whenever post-copy is allowed and both
// QEMUs offer it. The source QEMU opens the preempt channel at the switch
// to post-copy, to the same address as the main stream. The target tells
// the two apart only by the order in which they arrive. The proxy relays
// both, main first, and the migration completes in post-copy with the
// guest's memory whole. The source's QEMU says preempt was on, and the
// source proxy relayed a second memory connection.
func TestPostCopyPreemptThroughTheProxy(t *testing.T) {
	const name = "preempt"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", PostCopyAfter: 4 * time.Second, BandwidthMiBs: holdMiBs})
	waitJob(t, "a", name, "a migration under way", time.Minute, func(j api.Job) bool { return j.Phase == api.PhaseRunning })
	// The source's QEMU says. The target's is not asked: on this bed it
	// reports postcopy-ram off too, in migrations that end in post-copy.
	on, err := migrationCapability("a", name, "postcopy-preempt")
	if err != nil {
		t.Fatalf("QEMU's migration capabilities on a: %v", err)
	}
	if !on {
		t.Fatalf("QEMU on a has postcopy-preempt off: libvirt did not turn it on")
	}
	if err := <-done; err != nil {
		t.Fatalf("the migration failed: %v", err)
	}
	src := waitJob(t, "a", name, "Completed", 30*time.Second, drivenCompleted)
	if src.Mode != api.ModePostCopy {
		t.Fatalf("the migration completed in %s, not post-copy", src.Mode)
	}
	if src.Proxy == nil || src.Proxy.Bytes["memory"]["connections"] != 2 {
		t.Fatalf("the source proxy relayed %v, want two memory connections (main and preempt)", src.Proxy)
	}
	t.Logf("source proxy: %v; %d post-copy requests", src.Proxy.Bytes, src.PostCopyRequests)
	onlyOn(t, name, "b", "a")
	memoryIntact(t, name, before)
	assertTruth(t, name, "a", "b", start)
}
