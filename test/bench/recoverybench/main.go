// Command recoverybench measures how fast Ferry brings back a post-copy
// migration whose streams broke: on the test bed it migrates a guest that
// checks its own memory, breaks Ferry's proxy streams once the migration
// is in post-copy (a reset, or a link cut past the proxy's TCP user
// timeout), and times, from the moment the path is back, the job's first
// resumed recovery attempt and the guest's first console line, then checks
// the migration completed and the guest's memory arrived whole. Run it on
// a bed that is up with ferryd; test/bench/recovery.sh brings one up.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// goal is the time from the path's return to the guest running again that
// Ferry's recovery aims for.
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
	// BreakAfterSeconds is how long into post-copy the streams are broken.
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

var scenarioNames = []string{"reset", "cut"}

type options struct {
	scenarios []string
	runs      map[string]int
	cutHold   time.Duration
	settle    time.Duration
	jsonOut   string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "recoverybench:", err)
		os.Exit(1)
	}
}

func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("recoverybench", flag.ContinueOnError)
	scen := fs.String("scenarios", "reset,cut", "comma-separated scenarios, in the order run: reset (every proxy connection reset, the path back at once) and cut (the link down, past the proxy's 30 s TCP user timeout)")
	runsReset := fs.Int("runs-reset", 5, "runs of the reset scenario")
	runsCut := fs.Int("runs-cut", 3, "runs of the cut scenario")
	o := options{}
	fs.DurationVar(&o.cutHold, "cut-hold", 45*time.Second, "how long the link stays down, from the cut (the streams break only after the proxy's 30 s TCP user timeout)")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "pause between runs")
	fs.StringVar(&o.jsonOut, "json", "", "also write the settings and every run's figures to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.runs = map[string]int{"reset": *runsReset, "cut": *runsCut}
	for name, n := range o.runs {
		if n < 0 {
			return o, fmt.Errorf("--runs-%s %d: want 0 or more", name, n)
		}
	}
	if o.cutHold <= 0 {
		return o, fmt.Errorf("--cut-hold %v: want a positive duration", o.cutHold)
	}
	if o.settle < 0 {
		return o, fmt.Errorf("--settle %v: want 0 or more", o.settle)
	}
	total := 0
	for _, name := range strings.Split(*scen, ",") {
		name = strings.TrimSpace(name)
		if _, ok := o.runs[name]; !ok {
			return o, fmt.Errorf("--scenarios: unknown scenario %q (want %s)", name, strings.Join(scenarioNames, " or "))
		}
		for _, s := range o.scenarios {
			if s == name {
				return o, fmt.Errorf("--scenarios: %s named twice", name)
			}
		}
		o.scenarios = append(o.scenarios, name)
		total += o.runs[name]
	}
	if total == 0 {
		return o, errors.New("nothing to run: every scenario chosen has 0 runs")
	}
	return o, nil
}

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
runs:
	for _, sc := range o.scenarios {
		for i := 1; i <= o.runs[sc]; i++ {
			if len(results) > 0 {
				if stopped = sleepCtx(ctx, o.settle); stopped != nil {
					break runs
				}
			}
			name := fmt.Sprintf("rb-%s-%d-%s", sc, i, stamp)
			logf("%s run %d of %d: guest %s", sc, i, o.runs[sc], name)
			r, err := runOne(ctx, b, o, st, sc, i, name)
			results = append(results, r)
			logf("%s run %d: %s", sc, i, r.summary())
			// Written as it goes: a bench cut short keeps what it measured.
			if werr := writeJSON(o.jsonOut, st, results); werr != nil {
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
	report(os.Stdout, st, o.scenarios, results)
	if stopped != nil {
		return fmt.Errorf("stopped after %d runs: %w", len(results), stopped)
	}
	return nil
}

func runsText(o options) string {
	var parts []string
	for _, sc := range o.scenarios {
		parts = append(parts, fmt.Sprintf("%d of %s", o.runs[sc], sc))
	}
	return strings.Join(parts, ", ")
}

// benchFile is what --json writes.
type benchFile struct {
	Settings settings    `json:"settings"`
	Runs     []runResult `json:"runs"`
}

func writeJSON(path string, st settings, rs []runResult) error {
	if path == "" {
		return nil
	}
	out, err := json.MarshalIndent(benchFile{st, rs}, "", "  ")
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
