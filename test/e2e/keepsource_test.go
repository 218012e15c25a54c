//go:build e2e

package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// The target runs the guest, but its answers are lost, so the source is
// in doubt. An operator wrongly keeps the source's copy (ferryctl resolve
// --keep source), which runs again: two copies run. Once the target's
// answer arrives, the source hears that its copy was resumed on a false
// premise and pauses it, whole, for an operator: one copy runs.
func TestKeepingTheSourceWhileTheTargetRunsItPausesTheSourcesCopy(t *testing.T) {
	const name = "kept-wrongly"
	// More lost answers than the finish asks before it is in doubt (9 in
	// 30 s): the first answers to the source's word to the target are
	// lost too.
	withFaults(t, "b", "drop-finish-answer:12")
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	// The operator's word runs it on both nodes until the source's copy is
	// paused: FerryGuestRunningOnTwoNodes may rightly fire for it.
	runsTwiceOnPurpose(domainUUID(t, "a", name))
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"})
	waitJob(t, "a", name, "InDoubt", 2*time.Minute, func(j api.Job) bool { return j.Phase == api.PhaseInDoubt })
	out, err := exec.Command(ferryctlBin, "--socket", bed.Node("a").DebugSocket, "resolve", name, "--keep", "source").CombinedOutput()
	if err != nil {
		t.Fatalf("ferryctl resolve: %v: %s", err, out)
	}
	t.Logf("ferryctl resolve: %s", strings.TrimSpace(string(out)))
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the migration call did not return once resolved")
	}
	resolved := time.Now()
	var src, dst nodeTruth
	waitFor(t, "the source's copy paused once the target says it runs the guest", 3*time.Minute, func() bool {
		src, err = readNodeTruth("a", name)
		if err != nil {
			return false
		}
		dst, err = readNodeTruth("b", name)
		return err == nil && src.Present && src.State == int32(libvirt.DomainPaused) && dst.migratedHere()
	})
	t.Logf("%v after the resolve: %s; %s", time.Since(resolved).Round(time.Second), src, dst)
	waitFor(t, "the source's ferryd saying that two copies ran", 10*time.Second, func() bool {
		return ferrydLogLine("a", `"domain":"`+name+`"`, "the target runs the guest too: two copies ran")
	})
	// For the bed: one copy.
	withLibvirt(t, "a", func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if err == nil {
			err = l.DomainDestroy(dom)
		}
		return err
	})
}
