//go:build e2e

package e2e

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/test/testbed"
)

func completed(j api.Job) bool { return j.Phase == api.PhaseCompleted }

// drivenCompleted is a Ferry-driven migration's source job completed with
// the driver's own account in: libvirt's job ends a moment before the
// driver has told what its proxy carried.
func drivenCompleted(j api.Job) bool { return completed(j) && j.Proxy != nil && j.Proxy.Ended }

func TestIdleGuestMigratesAndBothNodesRecordIt(t *testing.T) {
	supported(t, "tracking", "yes")
	guest(t, testbed.GuestSpec{Name: "idle", MemoryMiB: 512, DirtyMiB: 64, DirtyRateMiBs: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: "idle", From: "a", To: "b"}); err != nil {
		t.Fatalf("migration failed: %v", err)
	}
	t.Logf("migration took %.1fs", time.Since(start).Seconds())

	src := waitJob(t, "a", "idle", "Completed", 15*time.Second, completed)
	// The target's final figures are read from libvirt right after the
	// completion event, so they may trail the phase change by a moment.
	dst := waitJob(t, "b", "idle", "Completed with final figures", 15*time.Second, func(j api.Job) bool {
		return completed(j) && j.DataProcessedBytes > 0
	})
	if src.Role != api.RoleSource || dst.Role != api.RoleTarget {
		t.Fatalf("roles: a=%s b=%s", src.Role, dst.Role)
	}
	if len(src.Iterations) == 0 || src.Iteration == 0 || len(src.Samples) == 0 || src.DataTotalBytes == 0 {
		t.Fatalf("source job lacks evidence: %d iterations (iteration %d), %d samples, total %d",
			len(src.Iterations), src.Iteration, len(src.Samples), src.DataTotalBytes)
	}
	// libvirt keeps the completed job's statistics on the target after pre-copy.
	if dst.DataProcessedBytes < 64<<20 || dst.Iteration == 0 || dst.EndTime == nil {
		t.Fatalf("target job lacks final figures: processed %d, iteration %d", dst.DataProcessedBytes, dst.Iteration)
	}
	t.Logf("source: %d iterations, %d samples; target: %d MiB sent in %d iterations, downtime %d ms",
		len(src.Iterations), len(src.Samples), dst.DataProcessedBytes>>20, dst.Iteration, dst.DowntimeMs)

	var all []api.Job
	ctlJSON(t, "b", &all, "jobs", "--all")
	if !slices.ContainsFunc(all, func(j api.Job) bool { return j.Domain == "idle" && completed(j) }) {
		t.Fatalf("ferryctl jobs --all on b does not list the completed job: %+v", all)
	}
	for node, role := range map[string]string{"a": "source", "b": "target"} {
		if v, ok := ferryOn(node).metric("ferry_migrations_total", `role="`+role+`"`, `result="completed"`); !ok || v < 1 {
			t.Errorf("node %s: ferry_migrations_total{role=%q,result=completed} = %v (present %v)", node, role, v, ok)
		}
	}
	if st, _ := domainState(t, "b", "idle"); st != 1 {
		t.Fatalf("guest not running on b after the migration (state %d)", st)
	}
	assertTruth(t, "idle", "a", "b", start)
}

func TestDirtyRateMatchesWhatTheGuestReports(t *testing.T) {
	supported(t, "dirty-rate", "yes")
	const rateMiBs = 32
	guest(t, testbed.GuestSpec{Name: "dirty", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: rateMiBs})
	time.Sleep(3 * time.Second) // let the guest's rate settle
	before, err := bed.Console("dirty")
	if err != nil {
		t.Fatal(err)
	}
	qemuPID, err := bed.QEMUPID("a", "dirty")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	// A bandwidth cap keeps pre-copy going for several iterations, so QEMU
	// measures the dirty rate more than once.
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: "dirty", From: "a", To: "b", BandwidthMiBs: 64}); err != nil {
		t.Fatalf("migration failed: %v", err)
	}
	after, err := bed.Console("dirty")
	if err != nil {
		t.Fatal(err)
	}
	guestRates := testbed.ParseRates(strings.TrimPrefix(after, before))
	src := waitJob(t, "a", "dirty", "Completed", 15*time.Second, completed)

	var ferryRates []float64
	for _, s := range src.Samples {
		if s.Iteration >= 2 && s.DirtyRateBytesPerSecond > 0 {
			ferryRates = append(ferryRates, float64(s.DirtyRateBytesPerSecond)/(1<<20))
		}
	}
	if len(guestRates) < 3 || len(ferryRates) == 0 {
		t.Fatalf("not enough figures: guest printed %d rates, ferry sampled %d dirty rates (%d samples, %d iterations)",
			len(guestRates), len(ferryRates), len(src.Samples), src.Iteration)
	}
	if q := src.QEMU; q == nil || q.PID != qemuPID || q.CPUUsageSeconds <= 0 {
		t.Errorf("no QEMU cgroup CPU figures of libvirt's QEMU (pid %d) on the source job: %+v", qemuPID, src.QEMU)
	} else {
		t.Logf("source QEMU (pid %d, cgroup %s): %.1f CPU-seconds during the job, %.0f%% of a core at the end, throttled %.1fs",
			q.PID, q.CgroupPath, q.CPUUsageSeconds, q.CPUPercent, q.ThrottledSeconds)
	}
	g, f := migration.Median(guestRates), migration.Median(ferryRates)
	t.Logf("dirty rate: guest printed median %.1f MiB/s over %d lines, ferry reported median %.1f MiB/s over %d samples (%d iterations)",
		g, len(guestRates), f, len(ferryRates), src.Iteration)
	if math.Abs(f-g) > 0.3*g {
		t.Fatalf("ferry's dirty rate %.1f MiB/s is not within 30%% of the guest's %.1f MiB/s (guest: %v, ferry: %v)", f, g, guestRates, ferryRates)
	}
	assertTruth(t, "dirty", "a", "b", start)
}
