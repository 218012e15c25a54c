//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// QEMU fails, rather than pauses, a post-copy whose stream is lost in its
// completion (after the target QEMU has loaded the last page, before its
// last word reaches the source), and then starts the source's vCPUs
// again on the memory of the switch while the target's copy runs on: two
// copies of one guest. The target's relay holds each read from its QEMU
// for seconds (the slow-return-path fault), and the source hears the
// target's finish only on its fourth asking, so that this window lasts;
// the target's ferryd is killed in it. Ferry pauses the source's
// copy the moment libvirt reports it running, and, the target's copy
// being whole, ends it as the Confirm would have: the guest runs on the
// target alone, its memory as it wrote it, and is defined there alone.
func TestAPostCopyLostInItsCompletionNeverRunsOnBothNodes(t *testing.T) {
	const name = "pclostend"
	// The target's answers to the first finishes are lost too, so that
	// the source's Confirm, which would stop its copy, waits seconds.
	before, evA, _, done := slowEndPostCopy(t, name, true, "slow-return-path,drop-finish-answer:3")
	waitEvent(t, evA, 3, 7, 2*time.Minute) // suspended/post-copy: the switch happened
	var last string
	waitFor(t, "the target QEMU to end the post-copy while the source's still waits for its word", 3*time.Minute, func() bool {
		a, errA := readNodeTruth("a", name)
		b, errB := readNodeTruth("b", name)
		last = a.String() + " | " + b.String()
		return errA == nil && errB == nil && b.migratedHere() && a.Present && a.State == stPaused
	})
	t.Logf("before the fault: %s", last)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.CrashFerryd(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Logf("the migration call returned: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("the migration call did not return within 3 minutes")
	}
	ranAgain := sourceRanAgain(t, evA)
	if ranAgain == 0 {
		t.Fatal("QEMU on a never started its copy again: the fault missed the post-copy's completion, and this test tested nothing")
	}
	t.Logf("QEMU started the source's copy again; libvirt shows it stopped running %v later", ranAgain)
	// Ferry pauses it on libvirt's event, within milliseconds; libvirt's
	// own Confirm would stop it only once the target's answer came, seconds
	// later (here 4 s), or never, had the target's copy not completed.
	if ranAgain > time.Second {
		t.Errorf("the source's copy ran for %v beside the target's: not paused at libvirt's word", ranAgain)
	}
	var truth string
	waitFor(t, "the source's copy to be ended", time.Minute, func() bool {
		a, errA := readNodeTruth("a", name)
		truth = a.String()
		return errA == nil && !a.running() && (!a.Present || a.State == stShutoff)
	})
	t.Logf("the source's copy at the end: %s", truth)
	onlyOn(t, name, "b", "a")
	// Defined where it runs alone, as libvirt's own client leaves it
	// (PERSIST_DEST, UNDEFINE_SOURCE): a boot of a starts no second copy.
	if d := definitionOn(t, "a", name); d.defined {
		t.Errorf("node a still holds a definition of %s (autostart %v)", name, d.autostart)
	}
	if d := definitionOn(t, "b", name); !d.defined {
		t.Errorf("node b, where %s runs, holds no definition of it", name)
	}
	oneQEMU(t, name)
	memoryIntact(t, name, before)
}

// sourceRanAgain waits for libvirt on the source to report the copy
// resumed (QEMU starting the vCPUs it stopped at the switch) and then
// suspended or stopped, and says how long it ran; 0 if it never resumed.
// A copy left running fails the test.
func sourceRanAgain(t *testing.T, ev <-chan lifecycleEvent) time.Duration {
	t.Helper()
	const suspended, resumed, stopped = 3, 4, 5
	var at time.Time
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e := <-ev:
			switch {
			case e.event == resumed && at.IsZero():
				at = e.at
			case (e.event == suspended || e.event == stopped) && !at.IsZero():
				return e.at.Sub(at)
			}
		case <-deadline:
			if !at.IsZero() {
				t.Fatal("the source's copy ran again after the switch and was never paused: the guest runs on both nodes")
			}
			return 0
		}
	}
}

// The target QEMU ends a post-copy by saying so to the source over the
// stream, and libvirt's Finish on the target may return before that word
// has reached the source (here: the target's relay holds it seconds).
// The target's streams stay until QEMU closes them: cut at the Finish,
// the source QEMU takes the missing word for a failure and starts its
// copy again, until libvirt's Confirm stops it.
func TestAFinishedPostCopyLetsTheSourceHearItsEnd(t *testing.T) {
	const name = "pcdrain"
	before, evA, start, done := slowEndPostCopy(t, name, false, "slow-return-path")
	if err := <-done; err != nil {
		t.Fatalf("the migration: %v", err)
	}
	waitFor(t, "libvirt to end the guest's copy on a", 30*time.Second, func() bool {
		a, err := readNodeTruth("a", name)
		return err == nil && a.migratedAway()
	})
	const resumed = 4
	for {
		select {
		case e := <-evA:
			if e.event == resumed {
				t.Fatalf("libvirt on a reported the source's copy running again (detail %d) %v after the migration began", e.detail, e.at.Sub(start))
			}
			continue
		default:
		}
		break
	}
	endsWholeOn(t, name, "b", "a", before, start)
}

// slowEndPostCopy starts a post-copy of a busy guest (persistent, or
// transient) a -> b through Ferry, node b's ferryd injecting faults, and
// returns the guest's checks so far, a's lifecycle events, when it began
// and its result.
func slowEndPostCopy(t *testing.T, name string, persistent bool, faults string) (before int, evA <-chan lifecycleEvent, start time.Time, done <-chan error) {
	t.Helper()
	withFaults(t, "b", faults)
	postCopyInto(t, "b")
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: 4, Persistent: persistent, Verify: true})
	before = verifiedSoFar(t, name)
	evA = watchLifecycle(t, "a", name)
	start = time.Now()
	done = migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: holdMiBs,
		PostCopyAfter: 2 * time.Second, PostCopyBandwidthMiBs: 32, Policy: "observe"})
	return before, evA, start, done
}
