package main

import (
	"fmt"
	"slices"
	"strings"
)

// figures are one way's: the median total, the longest pause of any
// guest, and the migrations that failed or fell back to post-copy.
type figures struct {
	Seconds    float64
	PauseMs    uint64
	Failed     int
	PostCopy   int
	MemoryBad  int
	Evacuation int
}

func figuresOf(evs []evacuation, way string) figures {
	var f figures
	var totals []float64
	for _, e := range evs {
		if e.Way != way {
			continue
		}
		f.Evacuation++
		totals = append(totals, e.Seconds)
		for _, m := range e.Guests {
			f.PauseMs = max(f.PauseMs, m.DowntimeMs)
			if m.Phase != "Completed" {
				f.Failed++
			}
			if m.PostCopy {
				f.PostCopy++
			}
			if !m.MemoryOK {
				f.MemoryBad++
			}
		}
	}
	if len(totals) > 0 {
		slices.Sort(totals)
		f.Seconds = totals[len(totals)/2]
	}
	return f
}

// report puts the two ways side by side, KubeVirt's defaults the baseline.
func report(evs []evacuation) string {
	fer, kv := figuresOf(evs, wayFerry), figuresOf(evs, wayKubeVirt)
	var b strings.Builder
	fmt.Fprintf(&b, "| way | evacuations | total (median) | × kubevirt-defaults | longest pause | failed | post-copy | memory not whole |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range []struct {
		way string
		f   figures
	}{{wayKubeVirt, kv}, {wayFerry, fer}} {
		ratio := "-"
		if kv.Seconds > 0 {
			ratio = fmt.Sprintf("%.2f", r.f.Seconds/kv.Seconds)
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f s | %s | %d ms | %d | %d | %d |\n", r.way, r.f.Evacuation, r.f.Seconds, ratio, r.f.PauseMs, r.f.Failed, r.f.PostCopy, r.f.MemoryBad)
	}
	goal := "met"
	if kv.Seconds == 0 || fer.Seconds > 0.7*kv.Seconds || fer.Failed > kv.Failed {
		goal = "NOT met"
	}
	fmt.Fprintf(&b, "goal (Ferry at most 0.7× the total, and no more failures): %s\n", goal)
	return b.String()
}
