//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// cpuHog keeps every CPU of the machine busy until the test ends, so QEMU
// starts its migration late.
func cpuHog(t *testing.T) {
	t.Helper()
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
}

// A switch to post-copy asked a millisecond into the migration, before
// QEMU's migration is active, on a machine kept busy: it is taken once
// QEMU can take it, not lost. The guest dirties faster than the link, so
// only post-copy completes the migration; it must end Completed in
// post-copy, with the guest's memory whole. Both ways: ferryd driving
// (--postcopy-after) and the bed's own libvirt client (socat relays).
func TestPostCopySwitchAskedAtTheStartOfABusyMigration(t *testing.T) {
	for _, via := range []string{"ferry", "socat"} {
		t.Run(via, func(t *testing.T) {
			name := "early-" + via
			guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, Verify: true})
			before := verifiedSoFar(t, name)
			cpuHog(t)
			start := time.Now()
			done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: via,
				PostCopyAfter: time.Millisecond, BandwidthMiBs: holdMiBs})
			if err := <-done; err != nil {
				t.Fatalf("the migration failed: %v", err)
			}
			src := waitJob(t, "a", name, "Completed", 30*time.Second, completed)
			if src.Mode != api.ModePostCopy {
				t.Fatalf("the migration completed in %s: the switch asked at its start was lost", src.Mode)
			}
			onlyOn(t, name, "b", "a")
			memoryIntact(t, name, before)
			assertTruth(t, name, "a", "b", start)
		})
	}
}

// An operator's abort and a switch to post-copy sent at the same moment:
// whichever libvirt takes first wins, the other is refused (an abort in
// post-copy needs --force), and the guest ends on exactly one node, whole,
// never split between two.
func TestAbortAtTheMomentOfThePostCopySwitch(t *testing.T) {
	const name = "abortswitch"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", PostCopy: true, BandwidthMiBs: holdMiBs})
	waitJob(t, "a", name, "a second pass", 2*time.Minute, func(j api.Job) bool { return j.Iteration >= 2 })
	sock := bed.Node("a").DebugSocket
	outs := make(chan string, 2)
	for _, verb := range []string{"postcopy", "abort"} {
		go func() {
			out, err := exec.Command(ferryctlBin, "--socket", sock, verb, name).CombinedOutput()
			outs <- fmt.Sprintf("%s: %v: %s", verb, err, out)
		}()
	}
	for range 2 {
		t.Log(<-outs)
	}
	err := <-done
	t.Logf("the migration ended: %v", err)
	here, there := "b", "a"
	if err != nil {
		here, there = "a", "b"
	}
	onlyOn(t, name, here, there)
	memoryIntact(t, name, before)
	assertTruth(t, name, "a", "b", start)
}
