//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// planCap is the fixed bandwidth cap of the planning tests' migrations.
const planCap = 64

// planNode restarts node a's ferryd knowing node b by name, measuring
// dirty rates often enough for a test, with the flags given.
func planNode(t *testing.T, args ...string) {
	t.Helper()
	ctx := context.Background()
	args = append([]string{"--peer", "b=" + bed.Node("b").ProxyAddr, "--dirty-rate-period", "5s", "--dirty-rate-sample", "2s"}, args...)
	if err := bed.SetNodeFerrydArgs(ctx, "a", args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.SetNodeFerrydArgs(context.Background(), "a") })
}

// waitMeasured waits until ferryd on a has measured each guest that many
// times.
func waitMeasured(t *testing.T, times int, names ...string) {
	t.Helper()
	waitFor(t, "dirty rates measured", 3*time.Minute, func() bool {
		resp, err := ferryOn("a").domains(false)
		if err != nil {
			return false
		}
		for _, n := range names {
			i := slices.IndexFunc(resp.Domains, func(d api.Domain) bool { return d.Name == n })
			if i < 0 || len(resp.Domains[i].DirtyRates) < times {
				return false
			}
		}
		return true
	})
}

// ferryctlMigrate runs `ferryctl migrate` on a to b and returns its exit
// status.
func ferryctlMigrate(t *testing.T, name string, args ...string) int {
	t.Helper()
	full := append([]string{"--socket", bed.Node("a").DebugSocket, "-o", "json", "migrate", name, "--to", bed.Node("b").ProxyAddr, "--to-node", "b"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, ferryctlBin, full...)
	cmd.Stderr = &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return 1
	case err != nil:
		t.Fatalf("ferryctl migrate %s: %v\n%s", name, err, errOut.String())
	}
	return 0
}

// TestPredictionMatchesRealMigrations predicts the migrations of five
// guests of different sizes and dirty rates at a fixed cap, from their
// measured dirty rates and a first migration over the path, then runs
// each: every predicted outcome is the real one, and each predicted time
// is within 30 % of the real one for those that converge.
func TestPredictionMatchesRealMigrations(t *testing.T) {
	// Four-second samples: QEMU samples about 512 pages per GiB, so a
	// two-second sample of a guest dirtying 16 MiB/s finds some 16 dirty
	// pages, and single figures ran from 10 to 22. Every guest here
	// takes longer than four seconds to rewrite its working set, so none
	// reads its set's size over the sample instead of its rate (see
	// docs/evacuation.md).
	planNode(t, "--dirty-rate-sample", "4s", "--dirty-rate-period", "8s")
	type spec struct {
		name                string
		memory, dirty, rate int
	}
	specs := []spec{
		{"pr-idle", 512, 256, -1},
		{"pr-slow", 256, 128, 16},
		{"pr-mid", 384, 256, 24},
		// Dirtying under half of what the link carries: nearer the
		// link's rate a pass's share m tends to 1 and the time to
		// 1/(1-m). QEMU samples a few hundred pages of a 512 MiB guest,
		// so one figure can be a fifth off; at half the link (32 MiB/s)
		// a CI run measured 39 and predicted 21 s against a real 15 s
		// (see docs/evacuation.md).
		{"pr-busy", 512, 384, 28},
		// At full speed under TCG about 80 MiB/s: 320 MiB in a sample,
		// short of the set's 416.
		{"pr-max", 512, 416, 0},
	}
	guest(t, testbed.GuestSpec{Name: "pr-warm", MemoryMiB: 128, DirtyMiB: 16, DirtyRateMiBs: -1})
	var names []string
	for _, s := range specs {
		guest(t, testbed.GuestSpec{Name: s.name, MemoryMiB: s.memory, DirtyMiB: s.dirty, DirtyRateMiBs: s.rate})
		names = append(names, s.name)
	}
	// The path's setup is learned from a migration over it.
	if code := ferryctlMigrate(t, "pr-warm", "--bandwidth-mibs", fmt.Sprint(planCap)); code != 0 {
		t.Fatalf("the first migration over the path failed")
	}
	// Six: the estimate is the median of the last five, and the first
	// figure, taken as the guest booted and filled its memory, is far
	// off (35 for a guest dirtying 16 MiB/s, with it a CI run's estimate
	// was 21, 31 % over).
	waitMeasured(t, 6, names...)
	for _, s := range specs {
		if s.rate > 0 && s.rate <= planCap {
			checkDirtyRate(t, s.name, s.rate)
		}
	}
	// The plan first measures the guests whose dirty rate is due: four
	// seconds each here (api/client waits two minutes for a plan).
	p, err := ferryOn("a").c.Plan(context.Background(), api.PlanRequest{Targets: []string{"b"}, BandwidthMiBs: planCap, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan: %s/s (%s), setup %.1fs (%s), max downtime %dms", fmtMiB(p.BandwidthBytesPerSecond), p.BandwidthFrom, p.SetupSeconds, p.SetupFrom, p.MaxDowntimeMs)
	for _, s := range specs {
		i := slices.IndexFunc(p.Entries, func(e api.PlanEntry) bool { return e.Domain == s.name })
		if i < 0 || p.Entries[i].Prediction == nil {
			t.Fatalf("no prediction for %s: %+v", s.name, p.Entries)
		}
		pr := *p.Entries[i].Prediction
		start := time.Now()
		// The one that cannot converge is ended by its deadline: soon.
		deadline := "25s"
		if s.rate == 0 {
			deadline = "10s"
		}
		code := ferryctlMigrate(t, s.name, "--bandwidth-mibs", fmt.Sprint(planCap), "--deadline", deadline)
		// The outcome is libvirt's, on both nodes: where the guest runs.
		o := assertTruth(t, s.name, "a", "b", start)
		moved := o.TDst.migratedHere() && o.TSrc.migratedAway()
		// The time is the job's, start to settled, as the plan learns a
		// migration's fixed cost: libvirt's own clock on b stops before
		// the finish and the confirm (printed beside it).
		j, ok := ferryOn("a").job(s.name)
		if !ok || j.EndTime == nil {
			t.Fatalf("%s: no finished job on a", s.name)
		}
		real := j.EndTime.Sub(j.StartTime).Seconds()
		libvirtSecs := 0.0
		if st := o.TDst.Stats; st != nil {
			libvirtSecs = float64(st.ElapsedMs) / 1000
		}
		t.Logf("%s (%d MiB, %d MiB/s asked, %s/s measured): predicted %s in %.1fs (%d passes), real: moved %v in %.1fs (%d passes; libvirt on b %.1fs, wall %.1fs); %s",
			s.name, s.memory, s.rate, fmtMiB(pr.DirtyBytesPerSecond), pr.Strategy, pr.Seconds, pr.Passes, moved, real, j.Iteration, libvirtSecs, time.Since(start).Seconds(), pr.Reason)
		if pr.Converges != moved || (code == 0) != moved {
			t.Errorf("%s: predicted %s, but libvirt says it moved: %v (ferryctl exit %d)", s.name, pr.Strategy, moved, code)
			continue
		}
		if !moved {
			onlyOn(t, s.name, "a", "b")
		}
		if pr.Converges && math.Abs(pr.Seconds-real) > 0.3*real {
			t.Errorf("%s: predicted %.1fs, real %.1fs: more than 30 %% apart", s.name, pr.Seconds, real)
		}
	}
}

func fmtMiB(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// TestEvacuateEmptiesTheNode evacuates four guests with two slots over a
// link of a fixed bandwidth: every guest ends up running on b with its
// memory as it wrote it, none on a, and the whole took the time the plan
// said, within 30 %.
func TestEvacuateEmptiesTheNode(t *testing.T) {
	planNode(t, "--migration-bandwidth-mibs", fmt.Sprint(planCap), "--outbound-migrations", "2")
	guest(t, testbed.GuestSpec{Name: "ev-warm", MemoryMiB: 128, DirtyMiB: 16, DirtyRateMiBs: -1})
	names := []string{"ev1", "ev2", "ev3", "ev4"}
	for i, n := range names {
		guest(t, testbed.GuestSpec{Name: n, MemoryMiB: 256 + 128*(i%2), DirtyMiB: 128, DirtyRateMiBs: 4 * (i + 1), Verify: true})
	}
	if code := ferryctlMigrate(t, "ev-warm"); code != 0 {
		t.Fatalf("the first migration over the path failed")
	}
	waitMeasured(t, 3, names...)
	var planned api.Plan
	ctlJSON(t, "a", &planned, "plan", "--to", "b")
	before := map[string]int{}
	for _, n := range names {
		before[n] = verifiedSoFar(t, n)
		// ferryd moves them, not the bed: the bed is told where each
		// guest's console on b starts, so its memory check there is read.
		if err := bed.NoteConsoleMove(n, "b"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(ferryctlBin, "--socket", bed.Node("a").DebugSocket, "-o", "json", "evacuate", "--to", "b").Output()
	if err != nil {
		t.Fatalf("ferryctl evacuate: %v\n%s", err, out)
	}
	var ev api.Evacuation
	if err := json.Unmarshal(out, &ev); err != nil {
		t.Fatalf("ferryctl evacuate -o json: %v\n%s", err, out)
	}
	var lines []string
	for _, e := range ev.Entries {
		p := 0.0
		if e.Prediction != nil {
			p = e.Prediction.Seconds
		}
		lines = append(lines, fmt.Sprintf("%d %s -> %s: %s, predicted %.1fs (%.1f-%.1f), real %.1fs", e.Order, e.Domain, e.Target, e.State, p, e.StartSeconds, e.EndSeconds, e.RealSeconds))
	}
	t.Logf("evacuation: predicted %.1fs, real %.1fs; %d moved, %d failed\n%s", ev.PredictedSeconds, ev.RealSeconds, ev.Moved, ev.Failed, strings.Join(lines, "\n"))
	// The warm-up guest is on b already; the four must follow.
	for _, n := range names {
		if st, _ := domainState(t, "b", n); st != 1 {
			t.Errorf("%s is not running on b (state %d)", n, st)
		}
		l, err := bed.Libvirt("a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.DomainLookupByName(n); err == nil {
			t.Errorf("%s is still on a", n)
		}
		l.Disconnect()
	}
	if ev.Moved != len(names) || ev.Failed != 0 {
		t.Errorf("moved %d, failed %d; want %d moved", ev.Moved, ev.Failed, len(names))
	}
	if math.Abs(ev.PredictedSeconds-ev.RealSeconds) > 0.3*ev.RealSeconds {
		t.Errorf("the evacuation took %.1fs, the plan said %.1fs: more than 30 %% apart", ev.RealSeconds, ev.PredictedSeconds)
	}
	// Last: the first guest whose memory is not whole ends the test.
	for _, n := range names {
		memoryIntact(t, n, before[n])
	}
}
