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

// A source QEMU held at half a CPU by libvirt's own quota (a pod CPU limit
// in effect) while pre-copy cannot keep up: the policy aborts it, and the
// job says QEMU was held below its need, with the cgroup and its figures,
// besides the verdict's rates. Its unstarved counterpart is
// TestPolicyActAbortsAHotGuestWithoutPostCopy (NotConverging).
func TestPolicyActClassifiesACPUStarvedSource(t *testing.T) {
	const name = "cpu-starved"
	// Under TCG a max-rate guest dirties ~160 MiB/s on a whole CPU and
	// still ~80 at half of one (~48 seen at 30 %), while the quota holds
	// QEMU in nearly every period; 128 MiB re-dirtied over a 24 MiB/s link
	// is re-sent whole each pass even at a third of this machine's speed,
	// and far above the 12 MiB the 500 ms cap lets the switch-over send.
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 128, DirtyRateMiBs: 0})
	const percent, linkMiBs = 50, 24
	lift, err := bed.LimitQEMUCPU("a", name, percent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lift(); err != nil {
			t.Logf("lifting the CPU limit: %v", err)
		}
	})
	before, err := bed.QEMUCgroupCPUStat("a", name)
	if err != nil {
		t.Fatal(err)
	}
	counted := func() float64 {
		v, _ := ferryOn("a").metric("ferry_migrations_total", `role="source"`, `result="aborted"`, `plane="Guest"`, `class="SourceCPUStarved"`)
		return v
	}
	countedBefore := counted()

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err = bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", BandwidthMiBs: linkMiBs,
		Policy: "act", MaxDowntimeMs: 500})
	if err == nil {
		t.Fatal("a CPU-starved source migrated without post-copy")
	}
	src := waitJob(t, "a", name, "Aborted", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	after, err := bed.QEMUCgroupCPUStat("a", name)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := domainState(t, "a", name); st != int32(libvirt.DomainRunning) {
		t.Fatalf("guest not running on a after the policy's abort (state %d)", st)
	}
	if src.Phase != api.PhaseAborted || src.AbortedBy != migration.AbortByPolicy {
		t.Fatalf("source job %s aborted by %q (%s), want Aborted by policy", src.Phase, src.AbortedBy, src.FailureReason)
	}
	assertClass(t, src, api.PlaneGuest, api.ClassSourceCPUStarved)
	if ev := strings.Join(src.FailureEvidence, "; "); !strings.Contains(ev, "throttled by its cgroup") || !strings.Contains(ev, before.Cgroup) {
		t.Errorf("evidence does not name the throttling of %s: %s", before.Cgroup, ev)
	}

	// The job's throttling is the cgroup's own: the same group, and no
	// more periods than the kernel counted over the test's longer window.
	q := src.QEMU
	if q == nil {
		t.Fatal("source job has no QEMU figures")
	}
	periods, throttled := after.Periods-before.Periods, after.ThrottledPeriods-before.ThrottledPeriods
	cgPct := 100 * float64(throttled) / float64(max(periods, 1))
	t.Logf("cgroup %s: %d of %d periods throttled (%.0f %%), %.1fs; job: %d periods throttled (%.0f %%), %.1fs in %s, QEMU at %.0f %% of a CPU; %d passes, aborted after %.1fs",
		after.Cgroup, throttled, periods, cgPct, after.ThrottledSeconds-before.ThrottledSeconds,
		q.ThrottledPeriods, q.ThrottledPercentPeriods, q.ThrottledSeconds, q.ThrottledCgroup, q.CPUPercent, src.Iteration, time.Since(start).Seconds())
	if q.ThrottledCgroup != after.Cgroup {
		t.Errorf("job reports throttling of cgroup %q, the domain's quota is on %q", q.ThrottledCgroup, after.Cgroup)
	}
	if q.ThrottledPeriods == 0 || q.ThrottledPeriods > throttled || q.ThrottledSeconds > after.ThrottledSeconds-before.ThrottledSeconds+0.001 {
		t.Errorf("job's %d throttled periods (%.2fs) against the cgroup's %d (%.2fs) over a longer window",
			q.ThrottledPeriods, q.ThrottledSeconds, throttled, after.ThrottledSeconds-before.ThrottledSeconds)
	}
	// A busy QEMU under a quota below what it would use runs out of it in
	// nearly every period; the job's share must say the same.
	if cgPct < 80 || q.ThrottledPercentPeriods < cgPct-15 {
		t.Errorf("throttled in %.0f %% of periods by the job, %.0f %% by the cgroup", q.ThrottledPercentPeriods, cgPct)
	}
	waitFor(t, "ferry_migrations_total{class=SourceCPUStarved} to count the abort", 10*time.Second, func() bool {
		return counted() == countedBefore+1
	})
	assertTruth(t, name, "a", "b", start)
}
