//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/test/testbed"
)

// deadline is the migration's own, shortened: the guest below cannot
// converge on holdMiBs, so only the deadline ends its pre-copy.
const deadline = 20 * time.Second

// A migration Ferry drives that cannot converge, with post-copy allowed and
// a policy that only observes: at its deadline its owner switches it to
// post-copy, and it completes there, the guest's memory whole.
func TestDeadlineSwitchesADrivenMigrationToPostCopy(t *testing.T) {
	const name = "dl-pc"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", BandwidthMiBs: holdMiBs,
		PostCopy: true, Policy: "observe", Deadline: deadline})
	if err != nil {
		t.Fatalf("the migration failed: %v", err)
	}
	src := waitJob(t, "a", name, "Completed", 30*time.Second, completed)
	if src.Mode != api.ModePostCopy {
		t.Fatalf("the migration completed in %s, not switched at its deadline", src.Mode)
	}
	var switched *api.Event
	for _, e := range src.Events {
		if e.Kind == "postcopy" && strings.Contains(e.Detail, "at the deadline") {
			switched = &e
		}
	}
	if switched == nil {
		t.Fatalf("no switch at the deadline among the job's events: %+v", src.Events)
	}
	// The job counts from libvirt's Begin, the deadline from Perform: the
	// target's Prepare (up to 16 s with a cold capabilities cache) lies
	// between.
	if at := switched.Time.Sub(src.StartTime); at < deadline || at > deadline+30*time.Second {
		t.Fatalf("switched %s into the job, want at its %s deadline", at.Round(time.Millisecond), deadline)
	}
	endsWholeOn(t, name, "b", "a", before, start)
}

// Without post-copy the owner aborts the same migration at its deadline:
// the guest runs on, whole, on the source, and the job says why.
func TestDeadlineAbortsADrivenMigrationWithoutPostCopy(t *testing.T) {
	const name = "dl-ab"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", BandwidthMiBs: holdMiBs,
		Policy: "observe", Deadline: deadline}); err == nil {
		t.Fatal("a guest that cannot converge migrated without post-copy")
	}
	src := waitJob(t, "a", name, "Aborted", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	if src.Phase != api.PhaseAborted || src.AbortedBy != migration.AbortByDeadline {
		t.Fatalf("source job %s aborted by %q (%s), want Aborted by the deadline", src.Phase, src.AbortedBy, src.FailureReason)
	}
	if !strings.Contains(src.FailureReason, "deadline of 20s") {
		t.Errorf("failure reason does not name the deadline: %s", src.FailureReason)
	}
	if src.FailureClass != api.ClassDeadlineExceeded {
		t.Errorf("failure class %s, want %s", src.FailureClass, api.ClassDeadlineExceeded)
	}
	if took := src.EndTime.Sub(src.StartTime); took < deadline || took > deadline+30*time.Second {
		t.Errorf("the job ended %s after its start, want about its %s deadline", took.Round(time.Millisecond), deadline)
	}
	if st, _ := domainState(t, "a", name); st != int32(libvirt.DomainRunning) {
		t.Fatalf("guest not running on a after the abort at the deadline (state %d)", st)
	}
	endsWholeOn(t, name, "a", "b", before, start)
}
