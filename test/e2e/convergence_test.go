//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

func TestMaxRateGuestIsStalledByThirdIterationThenAborted(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "hot", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: "hot", From: "a", To: "b", BandwidthMiBs: holdMiBs})

	j := waitJob(t, "a", "hot", "a convergence verdict", 2*time.Minute, func(j api.Job) bool {
		return j.Phase.Finished() || j.Convergence != api.VerdictUnknown
	})
	if j.Phase.Finished() {
		t.Fatalf("migration ended (%s: %s) before a verdict; the guest did not dirty fast enough", j.Phase, j.FailureReason)
	}
	if j.Convergence != api.VerdictStalled && j.Convergence != api.VerdictDiverging {
		t.Fatalf("verdict %s (%s), want Stalled or Diverging", j.Convergence, j.ConvergenceReason)
	}
	if at := verdictIteration(j); at > 3 {
		t.Fatalf("verdict reached only in iteration %d, want by the 3rd", at)
	}
	t.Logf("verdict %s at iteration %d: %s", j.Convergence, verdictIteration(j), j.ConvergenceReason)
	verdictAt := time.Now()
	t.Run("dashboard", checkDashboard)

	// The alert waits 10 minutes before it fires; here it must be pending,
	// in the real Prometheus evaluating deploy/'s rule.
	pendingAt, labels := waitAlert(t, "FerryMigrationNotConverging", "pending", 15*time.Second, "domain=hot", "node=a")
	t.Logf("FerryMigrationNotConverging pending in Prometheus %v after the verdict showed: %v", pendingAt.Sub(verdictAt).Round(time.Millisecond), labels)
	if labels["severity"] != "warning" {
		t.Errorf("alert labels %v, want severity warning", labels)
	}
	if s, err := alerts("FerryMigrationNotConverging", "firing", "domain=hot"); err != nil || len(s) > 0 {
		t.Errorf("FerryMigrationNotConverging firing before its 10 minutes: %v (%v)", s, err)
	}

	// ferryctl abort requests the abort and waits for the job to end.
	var src api.Job
	ctlJSON(t, "a", &src, "abort", "hot")
	if src.Phase != api.PhaseAborted || src.AbortStatus != api.AbortSucceeded {
		t.Fatalf("after ferryctl abort: phase %s, abortStatus %s (%s), want Aborted/Succeeded", src.Phase, src.AbortStatus, src.FailureReason)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("aborted migration reported success")
		}
		t.Logf("migrate call returned: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("migrate call did not return after the abort")
	}
	if st, _ := domainState(t, "a", "hot"); st != 1 {
		t.Fatalf("guest not running on a after the abort (state %d)", st)
	}
	waitFor(t, "the not-converging alert to clear after the abort", 15*time.Second, func() bool {
		s, err := alerts("FerryMigrationNotConverging", "pending", "domain=hot")
		return err == nil && len(s) == 0
	})
	dst := waitJob(t, "b", "hot", "Failed", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	assertClass(t, src, api.PlaneOperator, api.ClassAbortedByOperator)
	assertClass(t, dst, api.PlaneData, api.ClassIncomingStreamEnded)
	t.Logf("source: %s (%s); target: %s (%s)", src.Phase, src.FailureReason, dst.Phase, dst.FailureReason)
	assertTruth(t, "hot", "a", "b", start)
}

// verdictIteration is the iteration during which the job's first verdict
// other than Unknown was recorded.
func verdictIteration(j api.Job) uint64 {
	var at time.Time
	for _, e := range j.Events {
		if e.Kind == "convergence" && !strings.HasPrefix(e.Detail, string(api.VerdictUnknown)) {
			at = e.Time
			break
		}
	}
	if at.IsZero() {
		return j.Iteration
	}
	var n uint64
	for _, it := range j.Iterations {
		if !it.Start.After(at) {
			n = it.Number
		}
	}
	return n
}
