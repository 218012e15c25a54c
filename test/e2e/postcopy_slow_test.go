//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// A post-copy migration Ferry drives is never timed out by Ferry: on a
// link slowed to 2 MiB/s for post-copy, it lasts past the bounds the
// relay once had (the target's finish cut at its deadline plus 90 s) and
// completes. The guest touches its pages slowly, so most arrive through
// the slow background transfer, not on demand.
func TestAPostCopyPastTheOldRelayBoundsCompletes(t *testing.T) {
	const name = "pc-slow"
	const deadline = 10 * time.Second
	oldBound := deadline + 90*time.Second
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 1})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: holdMiBs,
		PostCopyAfter: 2 * time.Second, PostCopyBandwidthMiBs: 2, Deadline: deadline, Policy: "observe"})
	if err != nil {
		t.Fatalf("the migration failed: %v", err)
	}
	src := waitJob(t, "a", name, "Completed", 6*time.Minute, completed)
	if src.Mode != api.ModePostCopy {
		t.Fatalf("the migration completed in %s, want post-copy", src.Mode)
	}
	var switched time.Time
	for _, e := range src.Events {
		if e.Kind == "postcopy" && strings.Contains(e.Detail, "requested") && switched.IsZero() {
			switched = e.Time
		}
	}
	if switched.IsZero() || src.EndTime == nil {
		t.Fatalf("no switch or no end among the job's record: %+v", src.Events)
	}
	lasted := src.EndTime.Sub(src.StartTime)
	t.Logf("post-copy from %s to %s into the job: %s in post-copy, past the old bound of %s", switched.Sub(src.StartTime).Round(time.Second),
		lasted.Round(time.Second), src.EndTime.Sub(switched).Round(time.Second), oldBound)
	if lasted <= oldBound {
		t.Fatalf("the migration ended %s into the job, inside the old bound of %s: slow it down, or the test shows nothing", lasted.Round(time.Second), oldBound)
	}
	onlyOn(t, name, "b", "a")
	assertTruth(t, name, "a", "b", start)
}
