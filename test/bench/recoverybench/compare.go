package main

import (
	"fmt"
	"strings"

	"github.com/ferry-vm/ferry/test/bench/benchstat"
)

// A broken scenario's console and total times are read against the same
// migration left unbroken: in post-copy the guest waits on every page
// still on the source, so both hold post-copy's own pace, which no
// recovery can shorten. Only their ratio to, and difference from, the
// baseline say what the break cost. "resumed", QEMU's stream going again,
// is the recovery's own time, and the figure held to the goal.

// compared is a figure's median over a broken scenario's timed runs next
// to its median over the unbroken baseline's; nil where a side has no
// timed run (or, for X, where the baseline's median is 0).
type compared struct {
	Median         *float64 `json:"medianSeconds"`
	UnbrokenMedian *float64 `json:"unbrokenMedianSeconds"`
	// X is Median / UnbrokenMedian; Plus is Median - UnbrokenMedian, what
	// the break added.
	X    *float64 `json:"xUnbroken"`
	Plus *float64 `json:"plusSeconds"`
}

func compare(broken, base benchstat.Spread) compared {
	var c compared
	if broken.N > 0 {
		c.Median = ptr(broken.Median)
	}
	if base.N > 0 {
		c.UnbrokenMedian = ptr(base.Median)
	}
	if c.Median != nil && c.UnbrokenMedian != nil {
		c.Plus = ptr(*c.Median - *c.UnbrokenMedian)
		if *c.UnbrokenMedian > 0 {
			c.X = ptr(*c.Median / *c.UnbrokenMedian)
		}
	}
	return c
}

func ptr(x float64) *float64 { return &x }

// text is, with format "%.1f", e.g.
// "running again: reset 15.4 s vs 14.9 s unbroken (1.03x), +0.5 s".
func (c compared) text(label, sc, format string) string {
	switch {
	case c.Median == nil:
		return fmt.Sprintf("%s: %s: no run timed", label, sc)
	case c.UnbrokenMedian == nil:
		return fmt.Sprintf("%s: %s %s s; no unbroken run timed to compare with", label, sc, fmt.Sprintf(format, *c.Median))
	}
	x := "ratio -"
	if c.X != nil {
		x = fmt.Sprintf("%.2fx", *c.X)
	}
	return fmt.Sprintf("%s: %s %s s vs %s s unbroken (%s), %s s", label, sc,
		fmt.Sprintf(format, *c.Median), fmt.Sprintf(format, *c.UnbrokenMedian), x, signed(format, *c.Plus))
}

// signed prints a difference with its sign, and a difference that rounds
// to nothing as +0, never -0.
func signed(format string, d float64) string {
	s := fmt.Sprintf("%+"+strings.TrimPrefix(format, "%"), d)
	if strings.Trim(s, "+-0.") == "" {
		return "+" + s[1:]
	}
	return s
}

// goalFigure is the median "resumed" of a scenario's timed runs, against
// the goal.
type goalFigure struct {
	MedianSeconds float64 `json:"medianSeconds"`
	MinSeconds    float64 `json:"minSeconds"`
	MaxSeconds    float64 `json:"maxSeconds"`
	XGoal         float64 `json:"xGoal"`
}

// scenarioSummary is what a scenario's runs come to: printed at the end
// of the report and written to the JSON file.
type scenarioSummary struct {
	Scenario string `json:"scenario"`
	// Baseline marks the unbroken scenario, the one the others are read
	// against; its own figures are plain medians.
	Baseline bool `json:"baseline,omitempty"`
	Runs     int  `json:"runs"`
	Timed    int  `json:"timed"`
	// Resumed is nil for the baseline, which has no resume, and when no
	// run was timed.
	Resumed      *goalFigure `json:"resumed,omitempty"`
	RunningAgain compared    `json:"runningAgain"`
	Migration    compared    `json:"migration"`
}

// summarize sums up each scenario run, in the order given, every figure
// of a broken one against the baseline's.
func summarize(scenarios []string, rs []runResult, goalSeconds float64) []scenarioSummary {
	spread := func(runs []runResult, f func(runResult) float64) benchstat.Spread {
		return benchstat.Of(values(timed(runs), f))
	}
	running := func(r runResult) float64 { return r.RunningSeconds }
	migration := func(r runResult) float64 { return r.MigrationSeconds }
	base := scenarioRuns(rs, unbroken)
	var out []scenarioSummary
	for _, sc := range scenarios {
		runs := scenarioRuns(rs, sc)
		if len(runs) == 0 {
			continue
		}
		s := scenarioSummary{Scenario: sc, Baseline: sc == unbroken, Runs: len(runs), Timed: len(timed(runs))}
		if s.Baseline {
			s.RunningAgain = compare(spread(runs, running), benchstat.Spread{})
			s.Migration = compare(spread(runs, migration), benchstat.Spread{})
			out = append(out, s)
			continue
		}
		if r := spread(runs, func(r runResult) float64 { return r.ResumedSeconds }); r.N > 0 {
			s.Resumed = &goalFigure{r.Median, r.Min, r.Max, r.Median / goalSeconds}
		}
		s.RunningAgain = compare(spread(runs, running), spread(base, running))
		s.Migration = compare(spread(runs, migration), spread(base, migration))
		out = append(out, s)
	}
	return out
}

// lines are the summary's report lines.
func (s scenarioSummary) lines(goalSeconds float64, baseTimed, baseRuns int) []string {
	if s.Baseline {
		line := fmt.Sprintf("%s (the unbroken baseline): %d of %d runs timed", s.Scenario, s.Timed, s.Runs)
		if s.Timed > 0 {
			line += fmt.Sprintf("; medians: running again %.2f s after the virtual break, migration %.1f s", *s.RunningAgain.Median, *s.Migration.Median)
		}
		return []string{line}
	}
	head := fmt.Sprintf("%s: %d of %d runs timed, against %d of %d unbroken", s.Scenario, s.Timed, s.Runs, baseTimed, baseRuns)
	if baseRuns == 0 {
		head = fmt.Sprintf("%s: %d of %d runs timed; no unbroken baseline run (scenario %s)", s.Scenario, s.Timed, s.Runs, unbroken)
	}
	return []string{head, s.resumedText(goalSeconds),
		s.RunningAgain.text("running again", s.Scenario, "%.2f"),
		s.Migration.text("migration", s.Scenario, "%.1f")}
}

// resumedText is e.g. "resumed: reset median 0.42 s, 0.21x of the 2 s
// goal, under the goal (min 0.38 s, max 0.45 s)".
func (s scenarioSummary) resumedText(goalSeconds float64) string {
	r := s.Resumed
	if r == nil {
		return fmt.Sprintf("resumed: %s: no run timed (goal: under %g s)", s.Scenario, goalSeconds)
	}
	verdict := "under the goal"
	if r.MedianSeconds >= goalSeconds {
		verdict = "misses the goal"
	}
	return fmt.Sprintf("resumed: %s median %.2f s, %.2fx of the %g s goal, %s (min %.2f s, max %.2f s)",
		s.Scenario, r.MedianSeconds, r.XGoal, goalSeconds, verdict, r.MinSeconds, r.MaxSeconds)
}

// sideBySide compares, for each broken scenario run on both routes, the
// libvirt route's medians with the monitor's.
func sideBySide(sums []scenarioSummary) []string {
	by := map[string]map[string]scenarioSummary{}
	var kinds []string
	for _, s := range sums {
		kind, route, ok := strings.Cut(s.Scenario, "/")
		if !ok {
			continue
		}
		if by[kind] == nil {
			by[kind] = map[string]scenarioSummary{}
			kinds = append(kinds, kind)
		}
		by[kind][route] = s
	}
	var out []string
	for _, kind := range kinds {
		lv, okL := by[kind]["libvirt"]
		mon, okM := by[kind]["monitor"]
		if !okL || !okM {
			continue
		}
		line := fmt.Sprintf("%s: resumed %s; running again %s; migration %s", kind,
			pair(medianOf(lv.Resumed), medianOf(mon.Resumed), "%.2f"),
			pair(lv.RunningAgain.Median, mon.RunningAgain.Median, "%.2f"),
			pair(lv.Migration.Median, mon.Migration.Median, "%.1f"))
		out = append(out, line)
	}
	return out
}

func medianOf(g *goalFigure) *float64 {
	if g == nil {
		return nil
	}
	return &g.MedianSeconds
}

// pair is e.g. "libvirt 0.95 s vs monitor 1.10 s (0.86x)".
func pair(libvirt, monitor *float64, format string) string {
	if libvirt == nil || monitor == nil {
		return "not timed on both"
	}
	s := fmt.Sprintf("libvirt "+format+" s vs monitor "+format+" s", *libvirt, *monitor)
	if *monitor > 0 {
		s += fmt.Sprintf(" (%.2fx)", *libvirt / *monitor)
	}
	return s
}
