package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// settings go with the results, in print and in the JSON file, so that
// figures are never read without what they were measured with.
type settings struct {
	Accel string `json:"accel"`
	// The guests': the smallest the bed boots, idle.
	MemoryMiB     int `json:"memoryMiB"`
	DirtyMiB      int `json:"dirtyMiB"`
	DirtyRateMiBs int `json:"dirtyRateMiBs"`
	Parallel      int `json:"parallel"`

	WindowSeconds float64 `json:"windowSeconds"`
	SettleSeconds float64 `json:"settleSeconds"`
	Probes        int     `json:"probes"`
	Scrapes       int     `json:"scrapes"`

	// What node a's ferryd runs with, read from its command line.
	FerrydGlob           string `json:"ferrydGlob"`
	FerrydSampleInterval string `json:"ferrydSampleInterval"`

	HostCPUs   int     `json:"hostCpus"`
	HostMemGiB float64 `json:"hostMemGiB"`
	Counts     []int   `json:"counts"`
}

// report prints the settings, the table of every count, the machine at
// each, the costs per launcher and ratios to the baseline, the lines and
// the goals. Tables are Markdown, to be pasted as they are.
func report(w io.Writer, st settings, rs []countResult, took string) {
	fmt.Fprintf(w, "\nferryd on a node of KubeVirt launchers: the test bed's node a, accelerator %s%s\n", st.Accel, accelNote(st.Accel))
	fmt.Fprintf(w, "guests: %d MiB, 1 vCPU, idle (DirtyMiB %d, DirtyRateMiBs %d); launchers started %d at once\n", st.MemoryMiB, st.DirtyMiB, st.DirtyRateMiBs, st.Parallel)
	fmt.Fprintf(w, "ferryd: --libvirt-socket-glob %s, --sample-interval %s\n", st.FerrydGlob, st.FerrydSampleInterval)
	fmt.Fprintf(w, "each count: ferryd lists every launcher, %s s settle, a %s s window (CPU from /proc/PID/stat, libvirt calls from ferry_libvirt_calls_total at both ends; RSS, fds, threads and goroutines at its end); then %d GETs of /metrics and %d launchers without a guest timed until ferryd has them up (medians)\n",
		num(st.SettleSeconds), num(st.WindowSeconds), st.Scrapes, st.Probes)
	fmt.Fprintf(w, "machine: %d CPUs, %.1f GiB; counts %s; took %s\n\n", st.HostCPUs, st.HostMemGiB, countsText(st.Counts), took)
	if len(rs) == 0 {
		fmt.Fprintln(w, "no count measured")
		return
	}
	writeCountsTable(w, rs)
	fmt.Fprintln(w, "\nlibvirt calls by operation (top 3 by rate):")
	for _, r := range rs {
		fmt.Fprintf(w, "  %d launchers: %s\n", r.Launchers, opsText(r.TopOps))
	}
	fmt.Fprintln(w, "\nthe machine over each window (what bounds the count):")
	fmt.Fprintln(w)
	writeMachineTable(w, st, rs)
	s := summarize(rs)
	if len(s.PerLauncher) > 0 {
		fmt.Fprintf(w, "\nper launcher, over the %d-launcher baseline of this run: (value - baseline) / launchers added\n\n", s.BaselineLaunchers)
		writePerLauncher(w, s)
		fmt.Fprintf(w, "\nratio to the %d-launcher baseline (- where the baseline is 0)\n\n", s.BaselineLaunchers)
		writeRatios(w, s)
	}
	if len(s.Lines) > 0 {
		fmt.Fprintln(w, "\nleast-squares line through the counts (value = intercept + slope x launchers), read beyond them:")
		fmt.Fprintln(w)
		writeLines(w, s)
	}
	fmt.Fprintf(w, "\ngoals at N = %d launchers, and on the lines:\n\n", rs[len(rs)-1].Launchers)
	writeGoals(w, s)
}

func writeCountsTable(w io.Writer, rs []countResult) {
	fmt.Fprintln(w, "| launchers | CPU (% of a core) | RSS (MiB) | fds | goroutines | threads | libvirt calls/s | calls/s per launcher | new launcher seen (ms, median) | scrape (ms, median) |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %.2f | %.1f | %d | %.0f | %d | %.1f | %s | %s | %.1f |\n",
			r.Launchers, r.CPUPercentCore, r.RSSMiB, r.FDs, r.Goroutines, r.Threads, r.CallsPerSecond,
			opt(r.CallsPerLauncherSecond, "%.2f"), opt(r.SeenMedianMs, "%.0f"), r.ScrapeMedianMs)
	}
}

func writeMachineTable(w io.Writer, st settings, rs []countResult) {
	fmt.Fprintf(w, "| launchers | started in (s) | second starts | ferryd listed them (s) | host CPU busy (%% of %d CPUs) | launchers' CPU (%% of a core) | memory available (GiB) |\n", st.HostCPUs)
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %.0f | %d | %.1f | %.0f | %.0f | %.1f |\n", r.Launchers, r.StartSeconds, r.StartsRetried+r.ProbesRetried, r.SeenSeconds,
			r.HostBusyPercent, r.LaunchersCPUPercentCore, r.MemAvailableMiB/1024)
	}
}

func writePerLauncher(w io.Writer, s summary) {
	var head, rule []string
	for _, f := range figures {
		if f.Additive {
			head, rule = append(head, f.withUnit()), append(rule, "---:")
		}
	}
	fmt.Fprintf(w, "| launchers | %s |\n|---:|%s|\n", strings.Join(head, " | "), strings.Join(rule, "|"))
	for _, pl := range s.PerLauncher {
		var cells []string
		for _, f := range figures {
			if !f.Additive {
				continue
			}
			c, ok := pl.Cost[f.Key]
			cells = append(cells, cell(c, ok, perLauncherFormat(f)))
		}
		fmt.Fprintf(w, "| %d | %s |\n", pl.Launchers, strings.Join(cells, " | "))
	}
}

// perLauncherFormat shows a launcher's share with one more decimal than
// the figure's own: a few KiB or a hundredth of a call is the point.
func perLauncherFormat(f figure) string {
	switch f.Format {
	case "%.0f":
		return "%.2f"
	case "%.1f":
		return "%.2f"
	}
	return "%.3f"
}

func writeRatios(w io.Writer, s summary) {
	var head, rule []string
	for _, f := range figures {
		head, rule = append(head, "x "+f.Name), append(rule, "---:")
	}
	fmt.Fprintf(w, "| launchers | %s |\n|---:|%s|\n", strings.Join(head, " | "), strings.Join(rule, "|"))
	for _, pl := range s.PerLauncher {
		var cells []string
		for _, f := range figures {
			c, ok := pl.Ratio[f.Key]
			cells = append(cells, cell(c, ok, "%.2f"))
		}
		fmt.Fprintf(w, "| %d | %s |\n", pl.Launchers, strings.Join(cells, " | "))
	}
}

func writeLines(w io.Writer, s summary) {
	var at []string
	for _, n := range extrapolateTo {
		at = append(at, fmt.Sprintf("at %d", n))
	}
	fmt.Fprintf(w, "| figure | intercept | per launcher | r² | %s |\n|---|---:|---:|---:|%s\n", strings.Join(at, " | "), strings.Repeat("---:|", len(at)))
	for _, f := range figures {
		l, ok := s.Lines[f.Key]
		if !ok {
			continue
		}
		var cells []string
		for _, n := range extrapolateTo {
			cells = append(cells, f.text(l.at(float64(n))))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.2f | %s |\n", f.withUnit(), f.text(l.Intercept), unsigned(fmt.Sprintf(perLauncherFormat(f), l.Slope)), l.R2, strings.Join(cells, " | "))
	}
}

func writeGoals(w io.Writer, s summary) {
	var at []string
	for _, n := range extrapolateTo {
		at = append(at, fmt.Sprintf("line at %d", n))
	}
	at0 := 0
	if len(s.Goals) > 0 {
		at0 = s.Goals[0].AtLaunchers
	}
	fmt.Fprintf(w, "| goal | at %d launchers | verdict | %s |\n|---|---:|---|%s\n", at0, strings.Join(at, " | "), strings.Repeat("---:|", len(at)))
	for _, g := range s.Goals {
		value, verdict := "-", "not measured"
		if g.Value != nil {
			value, verdict = goalValue(g, *g.Value), metText(*g.Met)
		}
		var cells []string
		for _, n := range extrapolateTo {
			k := strconv.Itoa(n)
			if v, ok := g.OnLine[k]; ok {
				cells = append(cells, goalValue(g, v)+" ("+metText(g.MetOnLine[k])+")")
			} else {
				cells = append(cells, "-")
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.Goal, value, verdict, strings.Join(cells, " | "))
	}
}

func goalValue(g goalResult, v float64) string {
	switch {
	case g.Limit >= 100:
		return fmt.Sprintf("%.0f", v)
	case g.Limit >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func metText(met bool) string {
	if met {
		return "meets"
	}
	return "misses"
}

func opsText(ops []opRate) string {
	if len(ops) == 0 {
		return "no calls"
	}
	var parts []string
	for _, o := range ops {
		parts = append(parts, fmt.Sprintf("%s %.2f/s (%.0f %%)", o.Op, o.PerSec, o.Percent))
	}
	return strings.Join(parts, ", ")
}

func opt(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}

func cell(v float64, ok bool, format string) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func countsText(counts []int) string {
	var parts []string
	for _, n := range counts {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ", ")
}

// num prints 30 as "30" and 2.5 as "2.5".
func num(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

func accelNote(accel string) string {
	if accel == "TCG" {
		return " (software emulation: each idle guest costs the machine more CPU than under KVM)"
	}
	return ""
}
