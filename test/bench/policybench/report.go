package main

import (
	"fmt"
	"io"
	"strings"
)

// report prints per case and policy the runs' figures, then per case the
// median total times side by side with Ferry's ratio to KubeVirt's classic
// monitor, then the goals read off those figures. Tables are Markdown, to
// be pasted as they are.
func report(w io.Writer, o options, cs []guestCase, kinds []policyKind, rs []result) {
	fmt.Fprintf(w, "\nbandwidth cap %d MiB/s (post-copy %d MiB/s), maxDowntimeMs %d, deadline %v per GiB of guest memory for none and kubevirt-legacy\n",
		o.bandwidth, o.postCopyBandwidth, o.maxDowntimeMs, o.perGiB)
	fmt.Fprintf(w, "%s\n\n", runsText(kinds, rs))
	fmt.Fprintln(w, "| case | guest MiB / set / rate | policy | runs | outcome | total s | libvirt downtime ms | event pause ms | post-copy s | throttle % | passes | steps (median run) |")
	fmt.Fprintln(w, "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
	for _, c := range cs {
		for _, k := range kinds {
			runs := runsOf(rs, c.Name, k.Name)
			if len(runs) == 0 {
				continue
			}
			var steps string
			if m, ok := medianRun(runs); ok {
				steps = strings.Join(m.Steps, "; ")
			}
			var throttle uint64
			for _, r := range runs {
				throttle = max(throttle, r.ThrottlePercent)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %d | %s | %s |\n", c.Name, guestText(c), k.Name, len(runs),
				outcomeText(runs), totalOf(runs).Text("%.1f"), field(runs, libvirtDowntime).Text("%.0f"),
				field(runs, eventPauseMs).Text("%.0f"), field(runs, postCopySeconds).Text("%.1f"), throttle,
				field(runs, passes).Text("%.0f"), steps)
		}
	}
	fmt.Fprintln(w, "\nfigures: median (min-max) over the runs; total s over the completed runs (over all when none completed)")
	fmt.Fprintln(w, "libvirt downtime: libvirt's completed-job statistic on the target (it keeps none after post-copy)")
	fmt.Fprintln(w, "event pause: the source's suspended (migrated or post-copy) to the target's resumed (migrated or post-copy) lifecycle event, both libvirtds on one clock")
	if d := field(rs, func(r result) (float64, bool) {
		v, ok := libvirtDowntime(r)
		return r.PauseMs - v, ok && r.PauseMs > 0
	}); d.N > 0 {
		fmt.Fprintf(w, "event pause - libvirt downtime, %d pre-copy completions: median %+.1f ms, from %+.1f to %+.1f ms\n", d.N, d.Median, d.Min, d.Max)
	}

	fmt.Fprintln(w, "\nmedian total seconds (min-max; - none completed)")
	header := "| case | load | hard |"
	rule := "|---|---|---|"
	for _, k := range kinds {
		header += " " + k.Name + " |"
		rule += "---:|"
	}
	hasPair := has(kinds, "ferry") && has(kinds, "kubevirt-legacy")
	if hasPair {
		header += " ferry / kubevirt-legacy |"
		rule += "---:|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, rule)
	var g goals
	for _, c := range cs {
		hard := isHard(rs, c.Name, o.bandwidth)
		line := fmt.Sprintf("| %s | %s | %s |", c.Name, c.Load, yes(hard))
		for _, k := range kinds {
			line += " " + totalCell(runsOf(rs, c.Name, k.Name)) + " |"
		}
		if hasPair {
			line += " " + g.judge(rs, c, hard, o.maxDowntimeMs) + " |"
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "\nhard: libvirt's defaults (none) did not finish within the deadline in most runs; ratio: of the median total times")
	if hasPair {
		g.print(w, o.maxDowntimeMs)
	}
	for _, r := range rs {
		if r.PauseMs > float64(o.maxDowntimeMs) || r.DowntimeMs > o.maxDowntimeMs {
			fmt.Fprintf(w, "note: run %d: %s under %s paused the guest %.0f ms (events), %d ms (libvirt), over %d ms\n",
				r.Run, r.Case, r.Policy, r.PauseMs, r.DowntimeMs, o.maxDowntimeMs)
		}
	}
}

func libvirtDowntime(r result) (float64, bool) {
	return float64(r.DowntimeMs), r.DowntimeFrom == "libvirt"
}

func eventPauseMs(r result) (float64, bool) { return r.PauseMs, r.PauseMs > 0 }

func postCopySeconds(r result) (float64, bool) { return r.PostCopySeconds, r.PostCopySeconds > 0 }

func passes(r result) (float64, bool) { return float64(r.Passes), true }

// runsText says how often each policy ran.
func runsText(kinds []policyKind, rs []result) string {
	most := 0
	for _, r := range rs {
		most = max(most, r.Run)
	}
	var parts []string
	for _, k := range kinds {
		seen := map[int]bool{}
		for _, r := range rs {
			if r.Policy == k.Name {
				seen[r.Run] = true
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d", k.Name, len(seen)))
	}
	return fmt.Sprintf("runs per case: %s (of %d; the policies take turns within each run, a policy run fewer times ran in the first run only)",
		strings.Join(parts, ", "), most)
}

// goals collects what the issue asks of Ferry's policy, case by case.
type goals struct {
	notCompleted, slowHard, slowEasy, overDowntime []string
	// unmeasured are ferry's completions without a pause in the events,
	// noDowntime those with neither that nor libvirt's figure: the
	// downtime goal cannot be judged on them.
	unmeasured, noDowntime []string
	hardRatios, easyRatios []float64
	// worstPause is ferry's longest pause in any completed run, and where.
	worstPause   float64
	worstPauseAt string
}

// judge returns the case's ratio cell (of the median total times) and
// notes the goals it misses.
func (g *goals) judge(rs []result, c guestCase, hard bool, capMs uint64) string {
	f := runsOf(rs, c.Name, "ferry")
	l := runsOf(rs, c.Name, "kubevirt-legacy")
	fDone, lDone := completed(f), completed(l)
	anyDone := false
	for _, r := range rs {
		anyDone = anyDone || (r.Case == c.Name && r.Complete)
	}
	if anyDone && (len(f) == 0 || len(fDone) < len(f)) {
		g.notCompleted = append(g.notCompleted, fmt.Sprintf("%s (%d/%d)", c.Name, len(fDone), len(f)))
	}
	for _, r := range fDone {
		worst := max(r.PauseMs, float64(r.DowntimeMs))
		if worst > float64(capMs) {
			g.overDowntime = append(g.overDowntime, fmt.Sprintf("%s run %d (%.0f ms)", c.Name, r.Run, worst))
		}
		if worst > g.worstPause {
			g.worstPause, g.worstPauseAt = worst, fmt.Sprintf("%s run %d, %s", c.Name, r.Run, r.Outcome)
		}
		if r.PauseMs == 0 {
			g.unmeasured = append(g.unmeasured, fmt.Sprintf("%s run %d", c.Name, r.Run))
		}
		if worst == 0 {
			g.noDowntime = append(g.noDowntime, fmt.Sprintf("%s run %d", c.Name, r.Run))
		}
	}
	if len(fDone) == 0 || len(lDone) == 0 {
		return "-"
	}
	ratio := totalOf(fDone).Median / totalOf(lDone).Median
	if hard {
		g.hardRatios = append(g.hardRatios, ratio)
		if ratio > 0.5 {
			g.slowHard = append(g.slowHard, fmt.Sprintf("%s (%.2f)", c.Name, ratio))
		}
	} else {
		g.easyRatios = append(g.easyRatios, ratio)
		if ratio > 1.1 {
			g.slowEasy = append(g.slowEasy, fmt.Sprintf("%s (%.2f)", c.Name, ratio))
		}
	}
	return fmt.Sprintf("%.2f", ratio)
}

func (g *goals) print(w io.Writer, capMs uint64) {
	fmt.Fprintln(w, "\ngoals (figures, not pass/fail):")
	line := func(met bool, what string, misses []string) {
		mark := "met"
		if !met {
			mark = "MISSED: " + strings.Join(misses, ", ")
		}
		fmt.Fprintf(w, "  %-78s %s\n", what, mark)
	}
	line(len(g.notCompleted) == 0, "ferry completes every run of every case any policy completes", g.notCompleted)
	line(len(g.slowHard) == 0, fmt.Sprintf("hard cases: ferry <= 0.5x kubevirt-legacy median total time %s", ratios(g.hardRatios)), g.slowHard)
	line(len(g.slowEasy) == 0, fmt.Sprintf("easy cases: ferry <= 1.1x kubevirt-legacy median total time %s", ratios(g.easyRatios)), g.slowEasy)
	downtime := fmt.Sprintf("ferry's real downtime <= maxDowntimeMs (%d ms), every run, pre- and post-copy", capMs)
	if len(g.noDowntime) > 0 && len(g.overDowntime) == 0 {
		fmt.Fprintf(w, "  %-78s NOT JUDGED: no pause measured in %s\n", downtime, strings.Join(g.noDowntime, ", "))
	} else {
		line(len(g.overDowntime) == 0, downtime, g.overDowntime)
	}
	if g.worstPauseAt != "" {
		fmt.Fprintf(w, "  %-78s %.0f ms (%s)\n", "  ferry's longest pause (events or libvirt)", g.worstPause, g.worstPauseAt)
	}
	if len(g.unmeasured) > 0 {
		fmt.Fprintf(w, "  %-78s %s\n", "  (no pause found in the lifecycle events of ferry's completed runs)", strings.Join(g.unmeasured, ", "))
	}
}

func ratios(rs []float64) string {
	if len(rs) == 0 {
		return "(no case)"
	}
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%.2f", r))
	}
	return "(" + strings.Join(s, " ") + ")"
}

// isHard: pre-copy with libvirt's defaults did not finish in time in most
// of its runs. Without a none run, a case is hard when its guest dirties
// faster than the cap (a rate of 0 is as fast as it can).
func isHard(rs []result, name string, capMiBs int) bool {
	if none := runsOf(rs, name, "none"); len(none) > 0 {
		return 2*len(completed(none)) < len(none)
	}
	for _, c := range cases {
		if c.Name == name {
			return c.RateMiBs == 0 || c.RateMiBs > capMiBs
		}
	}
	return false
}

func has(kinds []policyKind, name string) bool {
	for _, k := range kinds {
		if k.Name == name {
			return true
		}
	}
	return false
}

func guestText(c guestCase) string {
	rate := fmt.Sprintf("%d MiB/s", c.RateMiBs)
	switch c.RateMiBs {
	case 0:
		rate = "max"
	case -1:
		rate = "idle"
	}
	return fmt.Sprintf("%d / %d / %s", c.MemoryMiB, c.DirtyMiB, rate)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
