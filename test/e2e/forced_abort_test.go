//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// An operator's forced abort of a driven post-copy pauses it, and it stays
// paused on both nodes: Ferry's recovery does not undo the operator's word
// behind their back. ferryctl recover resumes it, and the guest ends whole
// on the target.
func TestAForcedAbortInPostCopyStaysPausedUntilRecover(t *testing.T) {
	const name = "pcr-forced"
	r := breakablePostCopy(t, name)
	var res api.AbortResult
	ctlJSON(t, "a", &res, "abort", name, "--force")
	select {
	case err := <-r.done:
		if err == nil {
			t.Fatal("the migration reported success though an operator paused it in post-copy")
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the migration call did not return after the forced abort")
	}
	src := waitJob(t, "a", name, "PostCopyFailed", time.Minute, func(j api.Job) bool { return j.Phase == api.PhasePostCopyFailed })
	if !strings.Contains(src.FailureReason, "paused by an operator") {
		t.Errorf("the source's reason does not say an operator paused it: %q", src.FailureReason)
	}
	// Longer than the first recovery attempt would take to come.
	time.Sleep(20 * time.Second)
	libvirtShows(t, name, "held post-copy-failed", nodeTruth.postCopyFailedSource, nodeTruth.postCopyFailedTarget)
	attempts := metricSum("a", "ferry_migration_postcopy_recovery_attempts_total", "")
	resumed := metricSum("a", "ferry_migration_postcopy_recovery_attempts_total", `result="resumed"`)
	if resumed != r.resumed {
		t.Fatalf("Ferry resumed a post-copy an operator paused (%v resumes, %v attempts)", resumed-r.resumed, attempts)
	}
	var msg api.MessageResponse
	ctlJSON(t, "a", &msg, "recover", name)
	t.Logf("ferryctl recover: %s", msg.Message)
	waitJob(t, "a", name, "Completed", 5*time.Minute, completed)
	libvirtShows(t, name, "as a completed migration leaves it", nodeTruth.migratedAway, nodeTruth.migratedHere)
	endsWholeOn(t, name, "b", "a", r.before, r.start)
}
