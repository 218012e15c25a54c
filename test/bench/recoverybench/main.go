// Command recoverybench measures how fast Ferry brings back a post-copy
// migration whose streams broke: on the test bed it migrates a guest that
// checks its own memory, breaks Ferry's proxy streams once the migration
// is in post-copy (a reset, or a link cut past the proxy's TCP user
// timeout), and times, from the moment the path is back, the job's first
// resumed recovery attempt and the guest's first console line, then checks
// the migration completed and the guest's memory arrived whole. The same
// migration left unbroken (scenario none) is the baseline: in post-copy
// the guest waits on every page still on the source, so its console says
// little even unbroken, and the broken runs' console and total times are
// read as ratios to, and differences from, the baseline's. Run it on a
// bed that is up with ferryd; test/bench/recovery.sh brings one up.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// goal is the time from the path's return to QEMU's stream running again
// (the job's resumed event) that Ferry's recovery aims for: the time the
// guest waits on the recovery itself. The console's "running again" also
// waits on post-copy's own pace, so it is read against the baseline.
const goal = 2 * time.Second

// settings are what every run used; they go with the results, in print and
// in the JSON file, so figures are never read without them.
type settings struct {
	Accel                 string  `json:"accel"`
	MemoryMiB             int     `json:"memoryMiB"`
	DirtyMiB              int     `json:"dirtyMiB"`
	DirtyRateMiBs         int     `json:"dirtyRateMiBs"`
	BandwidthMiBs         int     `json:"bandwidthMiBs"`
	PostCopyAfterSeconds  float64 `json:"postCopyAfterSeconds"`
	PostCopyBandwidthMiBs int     `json:"postCopyBandwidthMiBs"`
	Policy                string  `json:"policy"`
	// BreakAfterSeconds is how long into post-copy the streams are broken
	// (for none, the moment its figures are timed from).
	BreakAfterSeconds float64 `json:"breakAfterSeconds"`
	CutHoldSeconds    float64 `json:"cutHoldSeconds"`
	GoalSeconds       float64 `json:"goalSeconds"`
}

// The guest and migration are those of the e2e recovery tests: post-copy
// capped at 8 MiB/s leaves it open for about a minute, long enough to
// break it and see it resume before it ends by itself.
var defaults = settings{
	MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 4,
	BandwidthMiBs: 48, PostCopyAfterSeconds: 2, PostCopyBandwidthMiBs: 8, Policy: "observe",
	BreakAfterSeconds: 1, GoalSeconds: goal.Seconds(),
}

func main() { testbed.Main("recoverybench", run) }

func run(ctx context.Context, args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	b, err := testbed.Open(testbed.Config{Log: os.Stderr})
	if err != nil {
		return err
	}
	for _, n := range []string{"a", "b"} {
		if b.FerrydPID(n) == 0 {
			return fmt.Errorf("no ferryd runs on node %s: bring the bed up with ferryd (testbed up --ferryd bin/ferryd)", n)
		}
	}
	st := defaults
	st.Accel = strings.ToUpper(b.Accel())
	st.CutHoldSeconds = o.cutHold.Seconds()
	logf("accelerator %s; runs: %s", st.Accel, runsText(o))

	// Guest names carry the start time: a guest left by an earlier,
	// interrupted run never collides with this one's.
	stamp := time.Now().Format("150405")
	t0 := time.Now()
	var results []runResult
	var stopped error
	scenarios := labels(plan(o))
	route := ""
runs:
	for _, p := range plan(o) {
		if p.route != route && o.runs[p.kind] > 0 {
			// The source says how it resumes at each prepare; the target
			// follows where its libvirt can.
			if stopped = b.SetNodeFerrydArgs(ctx, "a", "--postcopy-resume", p.route); stopped != nil {
				break runs
			}
			route = p.route
			logf("node a's ferryd now resumes by the %s route", route)
		}
		for i := 1; i <= o.runs[p.kind]; i++ {
			if len(results) > 0 {
				if stopped = sleepCtx(ctx, o.settle); stopped != nil {
					break runs
				}
			}
			name := fmt.Sprintf("rb-%s-%s-%d-%s", p.kind, p.route, i, stamp)
			logf("%s run %d of %d: guest %s", p.label, i, o.runs[p.kind], name)
			r, err := runOne(ctx, b, o, st, p, i, name)
			results = append(results, r)
			logf("%s run %d: %s", p.label, i, r.summary())
			// Written as it goes: a bench cut short keeps what it measured.
			if werr := writeJSON(o.jsonOut, st, scenarios, results); werr != nil {
				return werr
			}
			if err != nil {
				stopped = err
				break runs
			}
		}
	}
	logf("%d runs in %s", len(results), time.Since(t0).Round(time.Second))
	// What was measured is printed even when the bench stopped early.
	report(os.Stdout, st, scenarios, results)
	if stopped != nil {
		return fmt.Errorf("stopped after %d runs: %w", len(results), stopped)
	}
	return nil
}

// benchFile is what --json writes: every run, the baseline's too, and the
// comparisons the report prints, so the file reads without the report.
type benchFile struct {
	Settings settings          `json:"settings"`
	Runs     []runResult       `json:"runs"`
	Summary  []scenarioSummary `json:"summary"`
}

func writeJSON(path string, st settings, scenarios []string, rs []runResult) error {
	if path == "" {
		return nil
	}
	out, err := json.MarshalIndent(benchFile{st, rs, summarize(scenarios, rs, st.GoalSeconds)}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "recoverybench: "+format+"\n", args...)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
