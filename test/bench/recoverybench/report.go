package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ferry-vm/ferry/test/bench/benchstat"
)

// report prints the settings, a table per scenario (each run, then the
// median, min and max of the runs that completed and verified) and a
// summary per scenario: "resumed" against the goal, the console's
// "running again" and the migration's total time against the unbroken
// baseline. Tables are Markdown, to be pasted as they are.
func report(w io.Writer, st settings, scenarios []string, rs []runResult) {
	fmt.Fprintf(w, "\nFerry post-copy recovery on the test bed; accelerator %s%s\n", st.Accel, accelNote(st.Accel))
	fmt.Fprintf(w, "guest: %d MiB, %d MiB of it rewritten at %d MiB/s, all of it checked once a second\n", st.MemoryMiB, st.DirtyMiB, st.DirtyRateMiBs)
	fmt.Fprintf(w, "migration: a -> b through Ferry's proxy (%s), pre-copy capped at %d MiB/s, post-copy from %g s in at %d MiB/s, policy %s; the streams broken %g s into post-copy (none: never broken, timed from that moment)\n",
		tlsText(rs), st.BandwidthMiBs, st.PostCopyAfterSeconds, st.PostCopyBandwidthMiBs, st.Policy, st.BreakAfterSeconds)
	for _, sc := range scenarios {
		runs := scenarioRuns(rs, sc)
		if len(runs) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s%s\n\n", sc, scenarioText(sc, st), resumedByText(runs))
		table(w, sc, runs)
	}
	fmt.Fprintln(w, "\nresumed: from the path's return to the source job's first \"recovery ... resumed\" event, QEMU's stream going again:")
	fmt.Fprintf(w, "  what the guest waits on the recovery itself, so the figure held to the %g s goal\n", st.GoalSeconds)
	fmt.Fprintln(w, "running again: from the path's return (none: the virtual break) to the guest's first new progress line on its console (read every 50 ms)")
	fmt.Fprintln(w, "total pause: from the break (reset: the reset; cut: the job's postcopy-paused event) to that line")
	fmt.Fprintln(w, "migration: from the migrate call to its return")
	fmt.Fprintf(w, "running again and migration are read against the unbroken baseline, not the goal: in post-copy the guest waits on every page still on the source, so its console lags at the post-copy's %d MiB/s even unbroken; the difference is what the break cost\n", st.PostCopyBandwidthMiBs)
	fmt.Fprintln(w, "times start as the bench asks the bed to reset or restore, so they hold that call's own time; figures over the runs that completed and verified; ratios and differences of the medians")
	base := scenarioRuns(rs, unbroken)
	sums := summarize(scenarios, rs, st.GoalSeconds)
	for _, s := range sums {
		fmt.Fprintln(w)
		for _, line := range s.lines(st.GoalSeconds, len(timed(base)), len(base)) {
			fmt.Fprintln(w, line)
		}
	}
	if lines := sideBySide(sums); len(lines) > 0 {
		fmt.Fprintln(w, "\nthe routes side by side (medians; libvirt's over the monitor's):")
		for _, line := range lines {
			fmt.Fprintln(w, line)
		}
	}
}

// resumedByText says by which route the target's libvirt shows the runs'
// guests were resumable, where a route was asked.
func resumedByText(runs []runResult) string {
	seen := map[string]int{}
	asked := ""
	for _, r := range runs {
		if r.Route != "" && r.Scenario != unbroken {
			asked = r.Route
			seen[r.ResumedBy]++
		}
	}
	if asked == "" {
		return ""
	}
	var parts []string
	for _, by := range slices.Sorted(maps.Keys(seen)) {
		parts = append(parts, fmt.Sprintf("%s in %d", by, seen[by]))
	}
	return fmt.Sprintf("; the source asked for the %s route, and the target's libvirt shows: %s of %d runs", asked, strings.Join(parts, ", "), len(runs))
}

func accelNote(accel string) string {
	if accel == "TCG" {
		return " (software emulation: QEMU and the guest run slower than under KVM, so times read long)"
	}
	return ""
}

func tlsText(rs []runResult) string {
	on, off := 0, 0
	for _, r := range rs {
		switch {
		case r.TLS == nil:
		case *r.TLS:
			on++
		default:
			off++
		}
	}
	switch {
	case on > 0 && off == 0:
		return "mutual TLS"
	case off > 0 && on == 0:
		return "plain TCP"
	case on > 0:
		return "mutual TLS in some runs, plain TCP in others"
	}
	return "TLS not known"
}

func scenarioText(label string, st settings) string {
	sc, route, _ := strings.Cut(label, "/")
	switch route {
	case "libvirt":
		route = "; resumed by libvirt's own protocol (VIR_MIGRATE_POSTCOPY_RESUME) where the target's libvirt can"
	case "monitor":
		route = "; resumed through Ferry's QMP monitor of the target QEMU"
	}
	return scenarioKindText(sc, st) + route
}

func scenarioKindText(sc string, st settings) string {
	switch sc {
	case unbroken:
		return "never broken, the baseline: the same guest and migration, its figures timed from the moment the others break the streams (the virtual break)"
	case "reset":
		return "every connection of Ferry's proxies reset (RST); the path is back at once, so its return is the reset"
	case "cut":
		return fmt.Sprintf("the link taken down until %g s after the cut (the streams break at the proxy's 30 s TCP user timeout); the path's return is the link coming back up, the break the job's pause", st.CutHoldSeconds)
	}
	return sc
}

func scenarioRuns(rs []runResult, sc string) []runResult {
	var out []runResult
	for _, r := range rs {
		if r.Scenario == sc {
			out = append(out, r)
		}
	}
	return out
}

// column is one figure of the table.
type column struct {
	head   string
	format string
	value  func(runResult) float64
}

func columns(sc string) []column {
	// The baseline has no break, so no resume or pause of its own.
	if sc == unbroken {
		return []column{
			{"running again s", "%.2f", func(r runResult) float64 { return r.RunningSeconds }},
			{"migration s", "%.1f", func(r runResult) float64 { return r.MigrationSeconds }},
		}
	}
	cs := []column{
		{"resumed s", "%.2f", func(r runResult) float64 { return r.ResumedSeconds }},
		{"running again s", "%.2f", func(r runResult) float64 { return r.RunningSeconds }},
		{"total pause s", "%.2f", func(r runResult) float64 { return r.PauseSeconds }},
	}
	if sc == "cut" {
		cs = append(cs, column{"cut to pause s", "%.1f", func(r runResult) float64 { return r.DetectSeconds }})
	}
	return append(cs,
		column{"resuming attempt", "%.0f", func(r runResult) float64 { return float64(r.ResumeAttempt) }},
		column{"Ferry's resume ms", "%.0f", func(r runResult) float64 { return r.ResumeTookMs }},
		column{"migration s", "%.1f", func(r runResult) float64 { return r.MigrationSeconds }},
	)
}

func table(w io.Writer, sc string, runs []runResult) {
	cs := columns(sc)
	head, rule := "| run | guest | result |", "|---:|---|---|"
	for _, c := range cs {
		head += " " + c.head + " |"
		rule += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, r := range runs {
		row := fmt.Sprintf("| %d | %s | %s |", r.Run, r.Guest, resultText(sc, r))
		for _, c := range cs {
			if r.OK {
				row += " " + fmt.Sprintf(c.format, c.value(r)) + " |"
			} else {
				row += " - |"
			}
		}
		fmt.Fprintln(w, row)
	}
	ok := timed(runs)
	for _, stat := range []string{"median", "min", "max"} {
		note := ""
		if stat == "median" {
			note = fmt.Sprintf("%d of %d timed", len(ok), len(runs))
		}
		row := fmt.Sprintf("| %s | | %s |", stat, note)
		for _, c := range cs {
			s := benchstat.Of(values(ok, c.value))
			cell := "-"
			if s.N > 0 {
				cell = fmt.Sprintf(c.format, map[string]float64{"median": s.Median, "min": s.Min, "max": s.Max}[stat])
			}
			row += " " + cell + " |"
		}
		fmt.Fprintln(w, row)
	}
}

func resultText(sc string, r runResult) string {
	if r.OK {
		return fmt.Sprintf("completed, memory whole (%d checks since the %s)", r.ChecksAfter, sinceWhat(sc))
	}
	// A pipe would split the Markdown cell.
	return "failed: " + strings.ReplaceAll(r.Failure, "|", "/")
}

// timed are the runs whose figures count: completed and verified.
func timed(runs []runResult) []runResult {
	var out []runResult
	for _, r := range runs {
		if r.OK {
			out = append(out, r)
		}
	}
	return out
}

func values(runs []runResult, f func(runResult) float64) []float64 {
	var out []float64
	for _, r := range runs {
		out = append(out, f(r))
	}
	return out
}
