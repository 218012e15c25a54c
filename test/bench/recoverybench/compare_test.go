package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/test/bench/benchstat"
)

func TestComparedText(t *testing.T) {
	for _, c := range []struct {
		name           string
		broken, base   []float64
		format, want   string
		noRatio, noAll bool
	}{
		{"slower", []float64{15.4, 15.1, 16}, []float64{14.9}, "%.1f", "running again: reset 15.4 s vs 14.9 s unbroken (1.03x), +0.5 s", false, false},
		{"faster", []float64{9}, []float64{10, 11}, "%.2f", "running again: reset 9.00 s vs 10.50 s unbroken (0.86x), -1.50 s", false, false},
		{"no sign on nothing", []float64{10.001}, []float64{10.004}, "%.1f", "running again: reset 10.0 s vs 10.0 s unbroken (1.00x), +0.0 s", false, false},
		{"zero baseline", []float64{1}, []float64{0}, "%.1f", "running again: reset 1.0 s vs 0.0 s unbroken (ratio -), +1.0 s", true, false},
		{"no baseline", []float64{1.25}, nil, "%.2f", "running again: reset 1.25 s; no unbroken run timed to compare with", true, true},
		{"nothing timed", nil, []float64{3}, "%.2f", "running again: reset: no run timed", true, true},
	} {
		cmp := compare(benchstat.Of(c.broken), benchstat.Of(c.base))
		if got := cmp.text("running again", "reset", c.format); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if (cmp.X == nil) != c.noRatio || (cmp.Plus == nil) != c.noAll {
			t.Errorf("%s: ratio %v, difference %v", c.name, cmp.X, cmp.Plus)
		}
	}
}

func TestSummarizeAgainstTheBaseline(t *testing.T) {
	rs := []runResult{
		{Scenario: "reset", OK: true, ResumedSeconds: 0.38, RunningSeconds: 15, MigrationSeconds: 60},
		{Scenario: "none", OK: true, RunningSeconds: 14, MigrationSeconds: 57},
		{Scenario: "reset", OK: true, ResumedSeconds: 0.42, RunningSeconds: 16, MigrationSeconds: 62},
		// A failed run counts in neither median, on either side.
		{Scenario: "none", Failure: "x", RunningSeconds: 90, MigrationSeconds: 300},
		{Scenario: "reset", Failure: "x", ResumedSeconds: 9, RunningSeconds: 90},
		{Scenario: "reset", OK: true, ResumedSeconds: 0.45, RunningSeconds: 17, MigrationSeconds: 61},
	}
	ss := summarize([]string{"none", "reset", "cut"}, rs, 2)
	if len(ss) != 2 || ss[0].Scenario != "none" || !ss[0].Baseline || ss[1].Scenario != "reset" {
		t.Fatalf("summaries %+v: want none then reset, and no empty cut", ss)
	}
	none, reset := ss[0], ss[1]
	if none.Resumed != nil || *none.RunningAgain.Median != 14 || none.RunningAgain.X != nil || none.Timed != 1 || none.Runs != 2 {
		t.Errorf("baseline %+v", none)
	}
	if r := reset.Resumed; r == nil || r.MedianSeconds != 0.42 || r.XGoal != 0.21 || r.MinSeconds != 0.38 || r.MaxSeconds != 0.45 {
		t.Errorf("resumed %+v", reset.Resumed)
	}
	if c := reset.RunningAgain; *c.Median != 16 || *c.UnbrokenMedian != 14 || *c.Plus != 2 {
		t.Errorf("running again %+v", c)
	}
	if c := reset.Migration; *c.Median != 61 || *c.UnbrokenMedian != 57 || *c.Plus != 4 {
		t.Errorf("migration %+v", c)
	}
	lines := strings.Join(reset.lines(2, 1, 2), "\n")
	for _, want := range []string{"reset: 3 of 4 runs timed, against 1 of 2 unbroken", "resumed: reset median 0.42 s, 0.21x of the 2 s goal, under the goal (min 0.38 s, max 0.45 s)", "running again: reset 16.00 s vs 14.00 s unbroken (1.14x), +2.00 s", "migration: reset 61.0 s vs 57.0 s unbroken (1.07x), +4.0 s"} {
		if !strings.Contains(lines, want) {
			t.Errorf("lines lack %q:\n%s", want, lines)
		}
	}
	// The JSON holds the comparison's figures, unknown ones as null.
	out, err := json.Marshal(ss)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"scenario":"none","baseline":true`, `"unbrokenMedianSeconds":14`, `"plusSeconds":2`, `"xGoal":0.21`, `"xUnbroken":null`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("JSON lacks %s: %s", want, out)
		}
	}
}

func TestResumedTextAgainstTheGoal(t *testing.T) {
	slow := scenarioSummary{Scenario: "cut", Resumed: &goalFigure{MedianSeconds: 3, MinSeconds: 2.5, MaxSeconds: 4, XGoal: 1.5}}
	if got := slow.resumedText(2); !strings.Contains(got, "resumed: cut median 3.00 s, 1.50x of the 2 s goal, misses the goal") {
		t.Errorf("%q does not say it misses the goal", got)
	}
	if got := (scenarioSummary{Scenario: "cut"}).resumedText(2); got != "resumed: cut: no run timed (goal: under 2 s)" {
		t.Errorf("%q, want that nothing was timed", got)
	}
}

func TestOneOf(t *testing.T) {
	for names, want := range map[string]string{"a": "a", "a,b": "a or b", "none,reset,cut": "none, reset or cut"} {
		if got := oneOf(strings.Split(names, ",")); got != want {
			t.Errorf("%q: %q, want %q", names, got, want)
		}
	}
}

// A broken scenario run on both routes is compared route to route; one
// run on a single route is not.
func TestSideBySideComparesTheRoutes(t *testing.T) {
	sums := []scenarioSummary{
		{Scenario: "none", Baseline: true},
		{Scenario: "reset/libvirt", Resumed: &goalFigure{MedianSeconds: 0.5}, RunningAgain: compared{Median: ptr(10)}, Migration: compared{Median: ptr(60)}},
		{Scenario: "reset/monitor", Resumed: &goalFigure{MedianSeconds: 1}, RunningAgain: compared{Median: ptr(12)}, Migration: compared{Median: ptr(60)}},
		{Scenario: "cut/libvirt", Resumed: &goalFigure{MedianSeconds: 1}},
	}
	got := sideBySide(sums)
	want := []string{"reset: resumed libvirt 0.50 s vs monitor 1.00 s (0.50x); running again libvirt 10.00 s vs monitor 12.00 s (0.83x); migration libvirt 60.0 s vs monitor 60.0 s (1.00x)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("side by side:\n%q\nwant\n%q", got, want)
	}
}
