package main

import (
	"fmt"
	"io"
	"strings"
)

// report prints every run, then per case the total times side by side with
// Ferry's ratio to KubeVirt's classic monitor, then the goals read off
// those figures. Tables are Markdown, to be pasted as they are.
func report(w io.Writer, o options, cs []guestCase, kinds []policyKind, rs []result) {
	fmt.Fprintf(w, "\nbandwidth cap %d MiB/s (post-copy %d MiB/s), maxDowntimeMs %d, deadline %v per GiB of guest memory for none and kubevirt-legacy\n\n",
		o.bandwidth, o.postCopyBandwidth, o.maxDowntimeMs, o.perGiB)
	fmt.Fprintln(w, "| case | guest MiB / set / rate | policy | outcome | total s | downtime ms | post-copy s | throttle % | passes | steps |")
	fmt.Fprintln(w, "|---|---|---|---|---:|---:|---:|---:|---:|---|")
	for _, c := range cs {
		for _, k := range kinds {
			r, ok := find(rs, c.Name, k.Name)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f | %s | %s | %d | %d | %s |\n", c.Name, guestText(c), k.Name, r.Outcome,
				r.TotalSeconds, downtimeText(r), pcText(r), r.ThrottlePercent, r.Passes, strings.Join(r.Steps, "; "))
		}
	}
	fmt.Fprintln(w, "\ndowntime: libvirt's completed-job statistics on the target; * QEMU's own figure for the post-copy switch (libvirt keeps no completed statistics after post-copy)")

	fmt.Fprintln(w, "\ntotal seconds (- did not complete)")
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
		hard := isHard(rs, c.Name)
		line := fmt.Sprintf("| %s | %s | %s |", c.Name, c.Load, yes(hard))
		for _, k := range kinds {
			if r, ok := find(rs, c.Name, k.Name); ok && r.Complete {
				line += fmt.Sprintf(" %.1f |", r.TotalSeconds)
			} else {
				line += " - |"
			}
		}
		if hasPair {
			line += " " + g.judge(rs, c, hard, o.maxDowntimeMs) + " |"
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "\nhard: libvirt's defaults (none) did not finish within the deadline")
	if hasPair {
		g.print(w, o.maxDowntimeMs)
	}
	for _, r := range rs {
		if r.DowntimeMs > o.maxDowntimeMs {
			fmt.Fprintf(w, "note: %s under %s paused the guest %d ms (%s), over %d ms\n", r.Case, r.Policy, r.DowntimeMs, r.DowntimeFrom, o.maxDowntimeMs)
		}
	}
}

// goals collects what the issue asks of Ferry's policy, case by case.
type goals struct {
	notCompleted, slowHard, slowEasy, overDowntime []string
	// unmeasured are completions with no downtime figure at all.
	unmeasured             []string
	hardRatios, easyRatios []float64
}

// judge returns the case's ratio cell and notes the goals it misses.
func (g *goals) judge(rs []result, c guestCase, hard bool, capMs uint64) string {
	f, fok := find(rs, c.Name, "ferry")
	l, lok := find(rs, c.Name, "kubevirt-legacy")
	done := false
	for _, r := range rs {
		done = done || (r.Case == c.Name && r.Complete)
	}
	if done && (!fok || !f.Complete) {
		g.notCompleted = append(g.notCompleted, c.Name)
	}
	if fok && f.Complete && f.DowntimeMs > capMs {
		g.overDowntime = append(g.overDowntime, fmt.Sprintf("%s (%d ms)", c.Name, f.DowntimeMs))
	}
	if fok && f.Complete && f.DowntimeFrom == "" {
		g.unmeasured = append(g.unmeasured, c.Name)
	}
	if !fok || !lok || !f.Complete || !l.Complete {
		return "-"
	}
	ratio := f.TotalSeconds / l.TotalSeconds
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
		fmt.Fprintf(w, "  %-72s %s\n", what, mark)
	}
	line(len(g.notCompleted) == 0, "ferry completes every case any policy completes", g.notCompleted)
	line(len(g.slowHard) == 0, fmt.Sprintf("hard cases: ferry <= 0.5x kubevirt-legacy total time %s", ratios(g.hardRatios)), g.slowHard)
	line(len(g.slowEasy) == 0, fmt.Sprintf("easy cases: ferry <= 1.1x kubevirt-legacy total time %s", ratios(g.easyRatios)), g.slowEasy)
	line(len(g.overDowntime) == 0, fmt.Sprintf("ferry's real downtime <= maxDowntimeMs (%d ms)", capMs), g.overDowntime)
	if len(g.unmeasured) > 0 {
		fmt.Fprintf(w, "  %-72s %s\n", "  (downtime not measured, no libvirt or QEMU figure, on ferry's runs of)", strings.Join(g.unmeasured, ", "))
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

// isHard: pre-copy with libvirt's defaults did not finish in time. Without
// a none run, a case is hard when its guest dirties faster than the cap.
func isHard(rs []result, name string) bool {
	if r, ok := find(rs, name, "none"); ok {
		return !r.Complete
	}
	for _, c := range cases {
		if c.Name == name {
			return c.RateMiBs == 0
		}
	}
	return false
}

func find(rs []result, c, p string) (result, bool) {
	for _, r := range rs {
		if r.Case == c && r.Policy == p {
			return r, true
		}
	}
	return result{}, false
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

func downtimeText(r result) string {
	switch r.DowntimeFrom {
	case "libvirt":
		return fmt.Sprint(r.DowntimeMs)
	case "qemu":
		return fmt.Sprintf("%d*", r.DowntimeMs)
	}
	return "-"
}

func pcText(r result) string {
	if r.PostCopySeconds == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", r.PostCopySeconds)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
