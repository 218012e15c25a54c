//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

func TestFerrydRestartMidMigrationPicksTheJobUp(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "long", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	// libvirt relays through socat here: the migration must not depend on the
	// ferryd being restarted, as with a proxy other than Ferry's.
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: "long", From: "a", To: "b", Via: "socat", BandwidthMiBs: holdMiBs})
	before := waitJob(t, "a", "long", "iteration 2", 2*time.Minute, func(j api.Job) bool { return j.Iteration >= 2 })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.RestartFerryd(ctx, "a"); err != nil {
		t.Fatalf("restart-ferryd a: %v", err)
	}
	after := waitJob(t, "a", "long", "the job picked up again", 30*time.Second, func(j api.Job) bool {
		return j.Phase == api.PhaseRunning && j.Iteration >= before.Iteration && len(j.Samples) > 0
	})
	if after.Role != api.RoleSource {
		t.Fatalf("picked-up job has role %s", after.Role)
	}
	// The start time is rebuilt from libvirt's elapsed time, not the restart.
	if d := after.StartTime.Sub(before.StartTime).Abs(); d > 3*time.Second {
		t.Fatalf("start time moved by %v across the restart (%v -> %v)", d, before.StartTime, after.StartTime)
	}
	if j, ok := ferryOn("b").job("long"); !ok || j.Phase != api.PhaseRunning || j.Role != api.RoleTarget {
		t.Fatalf("target lost its job while the source's ferryd restarted: %+v", j)
	}

	var aborted api.Job
	ctlJSON(t, "a", &aborted, "abort", "long")
	if aborted.Phase != api.PhaseAborted {
		t.Fatalf("picked-up job after ferryctl abort: %s (%s)", aborted.Phase, aborted.FailureReason)
	}
	<-done
	waitJob(t, "b", "long", "target ended", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	assertTruth(t, "long", "a", "b", start)
	noPanics(t)
}

func TestLibvirtdRestartWhileIdleThenTrackingResumes(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "calm", MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: -1})
	restartedAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := bed.RestartLibvirtd(ctx, "a"); err != nil {
		t.Fatalf("restart-libvirtd a: %v", err)
	}
	waitFor(t, "ferryd a reconnected to libvirt", time.Minute, func() bool {
		d, err := ferryOn("a").domains(false)
		if err != nil || len(d.Libvirt) != 1 {
			return false
		}
		s := d.Libvirt[0]
		return s.Up && s.Since.After(restartedAt) && len(d.Domains) == 1 && d.Domains[0].Name == "calm"
	})
	if v, ok := ferryOn("a").metric("ferry_libvirt_up"); !ok || v != 1 {
		t.Fatalf("ferry_libvirt_up = %v (present %v) after reconnecting", v, ok)
	}
	start := time.Now()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: "calm", From: "a", To: "b"}); err != nil {
		t.Fatalf("migration after the libvirtd restart failed: %v", err)
	}
	waitJob(t, "a", "calm", "Completed", 15*time.Second, completed)
	waitJob(t, "b", "calm", "Completed", 15*time.Second, completed)
	assertTruth(t, "calm", "a", "b", start)
	noPanics(t)
}

// noPanics fails if either ferryd's log holds a panic.
func noPanics(t *testing.T) {
	t.Helper()
	for _, n := range []string{"a", "b"} {
		b, err := os.ReadFile(filepath.Join(bed.Node(n).Dir, "ferryd.log"))
		if err != nil {
			t.Fatalf("ferryd log of %s: %v", n, err)
		}
		if strings.Contains(string(b), "panic:") || strings.Contains(string(b), "goroutine ") {
			t.Fatalf("ferryd on %s panicked; see its log", n)
		}
	}
}
