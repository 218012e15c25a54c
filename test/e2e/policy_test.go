//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/test/testbed"
)

// policyStep is the job's first policy step of that action.
func policyStep(j api.Job, action string) (api.PolicyStep, bool) {
	if j.Policy == nil {
		return api.PolicyStep{}, false
	}
	for _, s := range j.Policy.Steps {
		if s.Action == action {
			return s, true
		}
	}
	return api.PolicyStep{}, false
}

// A guest that re-dirties its whole working set every pass on a link
// slower than it dirties cannot finish in pre-copy; with post-copy allowed
// the policy switches once the first pass has moved most of memory.
func TestPolicyActSwitchesAHotGuestToPostCopy(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "pol-pc", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err := bed.Migrate(ctx, testbed.MigrateSpec{Name: "pol-pc", From: "a", To: "b", BandwidthMiBs: holdMiBs,
		PostCopy: true, Policy: "act", MaxDowntimeMs: 500})
	if err != nil {
		t.Fatalf("migration under policy act with post-copy allowed: %v", err)
	}
	src := waitJob(t, "a", "pol-pc", "Completed", 15*time.Second, completed)
	step, ok := policyStep(src, "post-copy")
	if !ok || !step.Applied || step.Error != "" {
		t.Fatalf("no applied post-copy step on the source job: %+v", src.Policy)
	}
	if step.Iteration < 2 {
		t.Fatalf("post-copy decided in pass %d, before the first full pass ended", step.Iteration)
	}
	if src.Mode != api.ModePostCopy {
		t.Fatalf("source job mode %s, want PostCopy", src.Mode)
	}
	for _, want := range []string{"dirty ", "transfer ", "over the 500ms cap"} {
		if !strings.Contains(step.Reason, want) {
			t.Errorf("post-copy step's reason lacks %q: %s", want, step.Reason)
		}
	}
	t.Logf("policy: %s at pass %d: %s", step.Action, step.Iteration, step.Reason)
	o := assertTruth(t, "pol-pc", "a", "b", start)
	if !o.TDst.migratedHere() {
		t.Fatalf("libvirt on b does not run the guest: %s", o.TDst)
	}
}

// Without post-copy the same guest is aborted by the policy soon after the
// verdict, with the figures, and keeps running on the source.
func TestPolicyActAbortsAHotGuestWithoutPostCopy(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "pol-ab", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err := bed.Migrate(ctx, testbed.MigrateSpec{Name: "pol-ab", From: "a", To: "b", BandwidthMiBs: holdMiBs,
		Policy: "act", MaxDowntimeMs: 500})
	if err == nil {
		t.Fatal("a guest that cannot converge migrated without post-copy")
	}
	src := waitJob(t, "a", "pol-ab", "Aborted", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	if src.Phase != api.PhaseAborted || src.AbortedBy != migration.AbortByPolicy {
		t.Fatalf("source job %s aborted by %q (%s), want Aborted by policy", src.Phase, src.AbortedBy, src.FailureReason)
	}
	for _, want := range []string{"convergence policy", "dirty ", "post-copy not allowed"} {
		if !strings.Contains(src.FailureReason, want) {
			t.Errorf("failure reason lacks %q: %s", want, src.FailureReason)
		}
	}
	assertClass(t, src, api.PlaneGuest, api.ClassNotConverging)
	step, ok := policyStep(src, "abort")
	if !ok || !step.Applied {
		t.Fatalf("no applied abort step: %+v", src.Policy)
	}
	if at := verdictIteration(src); step.Iteration > at+3 {
		t.Fatalf("aborted at pass %d, more than 3 passes after the verdict at pass %d", step.Iteration, at)
	}
	if st, _ := domainState(t, "a", "pol-ab"); st != int32(libvirt.DomainRunning) {
		t.Fatalf("guest not running on a after the policy's abort (state %d)", st)
	}
	t.Logf("policy: aborted at pass %d (verdict at %d): %s", step.Iteration, verdictIteration(src), src.FailureReason)
	assertTruth(t, "pol-ab", "a", "b", start)
}

// A small working set re-dirtied every pass pins pre-copy just above what
// libvirt's 300 ms allows; the policy raises the downtime to what the low
// point needs, inside the cap, and QEMU switches over there.
func TestPolicyActSwitchesOverAStallJustAboveTheDowntime(t *testing.T) {
	// 18 MiB re-dirtied every pass on a 48 MiB/s link: ~370 ms, over
	// libvirt's 300 ms and inside the node's default 500 ms cap.
	guest(t, testbed.GuestSpec{Name: "pol-so", MemoryMiB: 512, DirtyMiB: 18, DirtyRateMiBs: 0})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const capMs = 500
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: "pol-so", From: "a", To: "b", BandwidthMiBs: holdMiBs,
		Policy: "act", MaxDowntimeMs: capMs}); err != nil {
		t.Fatalf("migration of a guest stalled just above the downtime: %v", err)
	}
	src := waitJob(t, "a", "pol-so", "Completed", 15*time.Second, completed)
	step, ok := policyStep(src, "switch-over")
	if !ok || !step.Applied || step.MaxDowntimeMs > capMs || step.MaxDowntimeMs <= 300 {
		t.Fatalf("want an applied switch-over step between 300 and %d ms: %+v", capMs, src.Policy)
	}
	if src.Mode != api.ModePreCopy {
		t.Fatalf("mode %s: the switch-over must be pre-copy's own", src.Mode)
	}
	o := assertTruth(t, "pol-so", "a", "b", start)
	if o.TDst.Stats == nil {
		t.Fatalf("libvirt on b kept no completed-job statistics: %s", o.TDst)
	}
	if dt := o.TDst.Stats.DowntimeMs; dt > capMs {
		t.Fatalf("real downtime %d ms over the %d ms cap", dt, capMs)
	}
	t.Logf("policy: switch-over at pass %d, max downtime %d ms; libvirt's real downtime %d ms: %s",
		step.Iteration, step.MaxDowntimeMs, o.TDst.Stats.DowntimeMs, step.Reason)
}

// Under --policy act, a migration Ferry does not drive (virt-launcher's,
// here the bed's own relays) is only advised: the advice shows on the job
// and once as an Event on its VMI, and libvirt's settings stay as they were.
func TestPolicyAdvisesOnAMigrationItDoesNotDrive(t *testing.T) {
	kubeUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := bed.SetNodeFerrydArgs(ctx, "a", "--policy", "act", "--max-downtime-ms", "500"); err != nil {
		t.Fatal(err)
	}
	defer bed.SetNodeFerrydArgs(context.Background(), "a")
	createVMI(t, "advise")
	domain := "default_advise"
	guest(t, testbed.GuestSpec{Name: domain, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	done := migrateAsync(t, testbed.MigrateSpec{Name: domain, From: "a", To: "b", Via: "socat", BandwidthMiBs: holdMiBs})
	j := waitJob(t, "a", domain, "the policy's advice", 2*time.Minute, func(j api.Job) bool {
		return j.Phase.Finished() || (j.Policy != nil && len(j.Policy.Steps) > 0)
	})
	if j.Phase.Finished() || j.Policy.Mode != "advise" {
		t.Fatalf("job %s, policy %+v: want advice on a running migration", j.Phase, j.Policy)
	}
	step := j.Policy.Steps[0]
	if step.Applied {
		t.Fatalf("the policy acted on a migration it does not drive: %+v", step)
	}
	waitFor(t, "one MigrationPolicyAdvice event", 30*time.Second, func() bool {
		evs, err := kube.Clientset.CoreV1().Events("default").List(ctx,
			metav1.ListOptions{FieldSelector: "involvedObject.name=advise,reason=MigrationPolicyAdvice"})
		return err == nil && len(evs.Items) == 1 && strings.Contains(evs.Items[0].Message, string(step.Action))
	})
	// Still pre-copy at libvirt's own downtime: nothing was changed.
	l, err := bed.Libvirt("a")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	dom, err := l.DomainLookupByName(domain)
	if err != nil {
		t.Fatal(err)
	}
	if ms, err := l.DomainMigrateGetMaxDowntime(dom, 0); err != nil || ms != 300 {
		t.Fatalf("libvirt's max downtime %d ms (%v), want its untouched 300 ms", ms, err)
	}
	now, _ := ferryOn("a").job(domain)
	if now.Mode != api.ModePreCopy || now.Phase.Finished() || now.AbortStatus != "" {
		t.Fatalf("the migration was changed: mode %s, phase %s, abort %q", now.Mode, now.Phase, now.AbortStatus)
	}
	t.Logf("advised %s at pass %d: %s", step.Action, step.Iteration, step.Reason)
	var res api.Job
	ctlJSON(t, "a", &res, "abort", domain)
	<-done
}
