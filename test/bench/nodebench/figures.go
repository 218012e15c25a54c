package main

import (
	"fmt"
	"strings"
)

// figure is one column of the report, fitted and compared the same way
// whatever it measures.
type figure struct {
	Key, Name, Unit, Format string
	// Additive figures grow by a cost per launcher; the others (times)
	// are read only as ratios and lines.
	Additive bool
	value    func(countResult) (float64, bool)
}

func always(f func(countResult) float64) func(countResult) (float64, bool) {
	return func(r countResult) (float64, bool) { return f(r), true }
}

func optional(f func(countResult) *float64) func(countResult) (float64, bool) {
	return func(r countResult) (float64, bool) {
		if p := f(r); p != nil {
			return *p, true
		}
		return 0, false
	}
}

var figures = []figure{
	{"cpuPercentCore", "CPU", "% of a core", "%.2f", true, always(func(r countResult) float64 { return r.CPUPercentCore })},
	{"rssMiB", "RSS", "MiB", "%.1f", true, always(func(r countResult) float64 { return r.RSSMiB })},
	{"fds", "fds", "", "%.0f", true, always(func(r countResult) float64 { return float64(r.FDs) })},
	{"goroutines", "goroutines", "", "%.0f", true, always(func(r countResult) float64 { return r.Goroutines })},
	{"threads", "threads", "", "%.0f", true, always(func(r countResult) float64 { return float64(r.Threads) })},
	{"libvirtCallsPerSecond", "libvirt calls/s", "", "%.1f", true, always(func(r countResult) float64 { return r.CallsPerSecond })},
	{"seenMedianMs", "new launcher seen", "ms", "%.0f", false, optional(func(r countResult) *float64 { return r.SeenMedianMs })},
	{"scrapeMedianMs", "scrape", "ms", "%.1f", false, always(func(r countResult) float64 { return r.ScrapeMedianMs })},
}

func figureByKey(key string) figure {
	for _, f := range figures {
		if f.Key == key {
			return f
		}
	}
	panic("no figure " + key)
}

func (f figure) text(x float64) string { return unsigned(fmt.Sprintf(f.Format, x)) }

// unsigned drops the sign of a figure that rounds to nothing: a fitted
// line's -0.0 says no more than 0.0.
func unsigned(s string) string {
	if strings.HasPrefix(s, "-") && strings.Trim(s, "-0.") == "" {
		return s[1:]
	}
	return s
}

// withUnit is e.g. "RSS (MiB)".
func (f figure) withUnit() string {
	if f.Unit == "" {
		return f.Name
	}
	return f.Name + " (" + f.Unit + ")"
}

// goal is one of the targets for ferryd on a full node.
type goal struct {
	Text string
	// Key is the figure held to it; PerLauncher divides it by the count.
	Key         string
	PerLauncher bool
	Limit       float64
	// Inclusive goals are met at the limit ("at most"), the others only
	// below it ("under").
	Inclusive bool
}

var goals = []goal{
	{"CPU under 2 % of a core", "cpuPercentCore", false, 2, false},
	{"RSS under 150 MiB", "rssMiB", false, 150, false},
	{"at most 0.2 libvirt calls per launcher per second", "libvirtCallsPerSecond", true, 0.2, true},
	{"a new launcher seen within 1 s", "seenMedianMs", false, 1000, true},
	{"a scrape under 20 ms", "scrapeMedianMs", false, 20, false},
}

func (g goal) met(x float64) bool {
	if g.Inclusive {
		return x <= g.Limit
	}
	return x < g.Limit
}

// extrapolateTo are the launcher counts the lines are read at: KubeVirt's
// default of 110 pods a node, and a dense node of 250.
var extrapolateTo = []int{110, 250}
