//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// withFaults restarts the node's ferryd injecting the named faults (its
// build reads FERRY_FAULTS), and restarts it plain when the test ends.
func withFaults(t *testing.T, node, faults string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	os.Setenv("FERRY_FAULTS", faults)
	err := bed.RestartFerryd(ctx, node)
	os.Unsetenv("FERRY_FAULTS")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := bed.RestartFerryd(ctx, node); err != nil {
			t.Errorf("restarting ferryd on %s without faults: %v", node, err)
		}
	})
}

// withFerrydArgs restarts node's ferryd with these extra flags for the
// rest of the test, and with the bed's own after it.
func withFerrydArgs(t *testing.T, node string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.SetNodeFerrydArgs(ctx, node, args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := bed.SetNodeFerrydArgs(ctx, node); err != nil {
			t.Errorf("restoring ferryd on %s: %v", node, err)
		}
	})
}

// endsWholeOn fails unless a migration a -> b that began at start left the
// guest running on node alone, its memory as it wrote it (before counts
// its checks before the migration), and both libvirts agreeing with
// Ferry's jobs.
func endsWholeOn(t *testing.T, name, node, other string, before int, start time.Time) {
	t.Helper()
	onlyOn(t, name, node, other)
	memoryIntact(t, name, before)
	assertTruth(t, name, "a", "b", start)
}

// onlyOn fails unless libvirt runs the guest on node, not paused and not
// post-copy-failed, and has no live copy of it (running or paused) on the
// other.
func onlyOn(t *testing.T, domain, node, other string) {
	t.Helper()
	here, err := readNodeTruth(node, domain)
	if err != nil {
		t.Fatal(err)
	}
	there, err := readNodeTruth(other, domain)
	if err != nil {
		t.Fatal(err)
	}
	if !here.running() || here.postCopyFailedTarget() || here.postCopyFailedSource() {
		t.Errorf("%s does not run whole on %s: %s", domain, node, here)
	}
	if there.Present && (there.State == stRunning || there.State == int32(libvirt.DomainPaused)) {
		t.Errorf("%s also has a live copy on %s: %s", domain, other, there)
	}
}

// The target finishes the migration and its answer never reaches the
// source. The source asks again and hears the same: the guest runs on
// the target alone. (Before, the source took the lost answer for a
// failure and resumed its own copy: the guest ran on both nodes.)
func TestLostFinishAnswerLeavesOneGuest(t *testing.T) {
	withFaults(t, "b", "drop-finish-answer")
	const name = "lostanswer"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := verifiedSoFar(t, name)
	start := time.Now()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"}); err != nil {
		t.Fatalf("the migration failed though the target finished it: %v", err)
	}
	onlyOn(t, name, "b", "a")
	memoryIntact(t, name, before)
	waitJob(t, "a", name, "Completed", 30*time.Second, func(j api.Job) bool { return j.Phase == api.PhaseCompleted })
	assertTruth(t, name, "a", "b", start)
	if !ferrydLogSays("b", "fault injected: the finish's answer is dropped") {
		t.Fatal("the target's ferryd never dropped an answer: the fault was not injected")
	}
}

// crashFerrydMidPreCopy migrates a busy guest a -> b through Ferry,
// SIGKILLs node's ferryd in its second pass and starts it again, and
// checks the migration failed. It returns what the guest's memory check
// had counted before and when the migration started.
func crashFerrydMidPreCopy(t *testing.T, name, node string) (before int, start time.Time) {
	t.Helper()
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, Verify: true})
	before, start = verifiedSoFar(t, name), time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: holdMiBs})
	waitJob(t, "a", name, "a second pass", 2*time.Minute, func(j api.Job) bool { return j.Iteration >= 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.CrashFerryd(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatalf("the migration completed though node %s's ferryd died mid pre-copy", node)
	}
	return before, start
}

// The target's ferryd dies mid pre-copy and comes back. libvirt there
// destroys the incoming guest with the connection that prepared it; the
// source's migration fails and its guest runs on, alone.
func TestTargetFerrydKilledMidPreCopyLeavesOneGuest(t *testing.T) {
	supported(t, "target-ferryd-killed", "yes")
	const name = "dstferryd"
	before, start := crashFerrydMidPreCopy(t, name, "b")
	endsWholeOn(t, name, "a", "b", before, start)
}

// memoryIntact fails unless the guest's own check of all its memory passes
// at least twice more from now, where it runs after the migration settled,
// and never failed on any node (before counts the passes before the
// migration, for the log).
func memoryIntact(t *testing.T, name string, before int) {
	t.Helper()
	settled := verifiedSoFar(t, name)
	var ok int
	var bad string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		var err error
		if ok, bad, err = bed.GuestVerified(name); err != nil {
			t.Fatal(err)
		}
		if bad != "" || ok >= settled+2 {
			break
		}
	}
	if bad != "" || ok < settled+2 {
		t.Fatalf("the guest's memory check: %d passes since the migration settled, first failure %q", ok-settled, bad)
	}
	t.Logf("the guest checked all its memory %d times during the migration and %d times since it settled, every page as it last wrote it", settled-before, ok-settled)
}

// verifiedSoFar is how many times the guest's check has passed.
func verifiedSoFar(t *testing.T, name string) int {
	t.Helper()
	ok, bad, err := bed.GuestVerified(name)
	if err != nil || bad != "" {
		t.Fatalf("the guest's memory check before the migration: %v %q", err, bad)
	}
	return ok
}

// ferrydLogLine reports whether one line of the node's ferryd log holds
// every one of texts.
func ferrydLogLine(node string, texts ...string) bool {
	b, err := os.ReadFile(filepath.Join(bed.Node(node).Dir, "ferryd.log"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		all := true
		for _, t := range texts {
			all = all && strings.Contains(l, t)
		}
		if all {
			return true
		}
	}
	return false
}

// ferrydLogSays reports whether the node's ferryd log holds text.
func ferrydLogSays(node, text string) bool {
	b, err := os.ReadFile(filepath.Join(bed.Node(node).Dir, "ferryd.log"))
	return err == nil && strings.Contains(string(b), text)
}

// A persistent guest with autostart, its config changed (--config) before
// the migration: libvirt's Finish on b saves the definition Ferry checked,
// the pending change in it, before the guest runs there; a's goes, with
// its autostart. Then a "reboots" (libvirtd starts without its
// autostarted marker): it starts nothing, and one QEMU of the guest runs.
func TestPersistentDomainMovesItsDefinition(t *testing.T) {
	supported(t, "definition-moves", "yes")
	const name = "persist"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Persistent: true, Verify: true})
	const pendingKiB = 320 << 10
	autostartOn(t, "a", name)
	withLibvirt(t, "a", func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if err == nil {
			err = l.DomainSetMemoryFlags(dom, pendingKiB, uint32(libvirt.DomainMemConfig|libvirt.DomainMemMaximum))
		}
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := verifiedSoFar(t, name)
	start := time.Now()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"}); err != nil {
		t.Fatal(err)
	}
	onlyOn(t, name, "b", "a")
	memoryIntact(t, name, before)
	if d := definitionOn(t, "a", name); d.defined {
		t.Errorf("node a still holds a definition of %s (autostart %v)", name, d.autostart)
	}
	d := definitionOn(t, "b", name)
	if !d.defined || !strings.Contains(d.xml, fmt.Sprintf("<memory unit='KiB'>%d</memory>", pendingKiB)) {
		t.Errorf("node b: defined %v, want the definition with the pending change (%d KiB):\n%s", d.defined, pendingKiB, d.xml)
	}
	assertTruth(t, name, "a", "b", start)
	bootLibvirtd(t, "a")
	oneQEMU(t, name)
	onlyOn(t, name, "b", "a")
}

// The source's ferryd dies mid pre-copy and comes back. Its relay went
// with it, so libvirt fails the migration and runs the guest on; the
// restarted ferryd finds the migration it was driving in its state
// directory, has the target drop its copy, and records the migration's
// end, which it would otherwise have forgotten.
func TestSourceFerrydKilledMidPreCopyLeavesOneGuest(t *testing.T) {
	supported(t, "source-ferryd-killed", "yes")
	const name = "srcferryd"
	before, start := crashFerrydMidPreCopy(t, name, "a")
	j := waitJob(t, "a", name, "the restarted ferryd's record of the migration", 90*time.Second, func(j api.Job) bool {
		return j.Phase == api.PhaseFailed && j.Proxy != nil && strings.Contains(j.FailureReason, "ferryd restarted")
	})
	t.Logf("the restarted source ferryd recorded: %s", j.FailureReason)
	endsWholeOn(t, name, "a", "b", before, start)
}

// The source's libvirtd freezes for 10 s in the middle of a driven
// pre-copy. QEMU migrates on meanwhile; ferryd's monitoring connection
// misses its pings and is cut, but the migration runs on a connection of
// its own, which no ping cuts: once libvirtd goes on, the migration ends
// with the guest on exactly one node.
func TestSourceLibvirtdFrozenDuringADrivenPreCopy(t *testing.T) {
	const name = "frozen"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 256, DirtyRateMiBs: 16, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: 32})
	waitJob(t, "a", name, "the first pass under way", time.Minute, func(j api.Job) bool { return j.DataProcessedBytes > 32<<20 })
	if err := bed.FreezeLibvirtd("a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the migration failed after libvirtd froze for 10 s: %v", err)
	}
	endsWholeOn(t, name, "b", "a", before, start)
}

// migrateIntoDoubt migrates a guest a -> b through Ferry with node b's
// ferryd injecting faults, and returns once the source's job is InDoubt:
// what the guest's memory check had counted before, when the migration
// started, and its result to come.
func migrateIntoDoubt(t *testing.T, name, faults string) (before int, start time.Time, done <-chan error) {
	t.Helper()
	withFaults(t, "b", faults)
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	before, start = verifiedSoFar(t, name), time.Now()
	done = migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"})
	j := waitJob(t, "a", name, "InDoubt", 2*time.Minute, func(j api.Job) bool { return j.Phase == api.PhaseInDoubt })
	t.Logf("in doubt: %s", j.FailureReason)
	return before, start, done
}

// The target finishes the migration and then, for close to a minute, its
// answers never arrive. The source keeps the guest paused, whole, shows
// the job InDoubt, and keeps asking; once an answer arrives it settles:
// the guest runs on the target alone.
func TestAMigrationInDoubtStaysPausedThenSettles(t *testing.T) {
	const name = "indoubt"
	before, start, done := migrateIntoDoubt(t, name, "drop-finish-answer:12")
	// Meanwhile the source's copy is paused and the target's runs: never
	// two running copies.
	src, err := readNodeTruth("a", name)
	if err != nil {
		t.Fatal(err)
	}
	if src.running() {
		t.Fatalf("the source runs its copy while the migration is in doubt: %s", src)
	}
	if err := <-done; err != nil {
		t.Fatalf("the migration did not settle as completed: %v", err)
	}
	endsWholeOn(t, name, "b", "a", before, start)
}

// The target never answers after its Finish succeeded. The source stays
// in doubt, the guest paused there, until an operator who has looked at
// the target says to keep its copy: the source's copy then ends, and the
// guest runs on the target alone.
func TestAnOperatorResolvesAMigrationInDoubt(t *testing.T) {
	const name = "resolved"
	before, start, done := migrateIntoDoubt(t, name, "drop-finish-answer:100000")
	out, err := exec.Command(ferryctlBin, "--socket", bed.Node("a").DebugSocket, "resolve", name, "--keep", "target").CombinedOutput()
	if err != nil {
		t.Fatalf("ferryctl resolve: %v: %s", err, out)
	}
	t.Logf("ferryctl resolve: %s", strings.TrimSpace(string(out)))
	if err := <-done; err != nil {
		t.Fatalf("the migration did not end completed once resolved: %v", err)
	}
	endsWholeOn(t, name, "b", "a", before, start)
}
