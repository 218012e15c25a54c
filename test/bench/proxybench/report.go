package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/ferry-vm/ferry/test/bench/benchstat"
)

// sample is one run of one variant.
type sample struct {
	Seconds   float64 `json:"seconds"`
	MiBps     float64 `json:"mibPerSecond"`
	SourceCPU float64 `json:"sourceRelayCPUSeconds"`
	TargetCPU float64 `json:"targetRelayCPUSeconds"`
	HostCPU   float64 `json:"hostCPUSeconds"`
}

type variantResult struct {
	Key      string `json:"key"`
	Name     string `json:"name"`
	Conns    int    `json:"connections"`
	Baseline string `json:"baseline"`
	// Medians over the runs; ratios are of the medians, nil when the
	// variant compared with was not run.
	MiBps          float64  `json:"mibPerSecond"`
	XRaw           *float64 `json:"xRaw"`
	XBaseline      *float64 `json:"xBaseline"`
	RelayCPUPerGiB float64  `json:"relayCPUSecondsPerGiB"`
	HostCPUPerGiB  float64  `json:"hostCPUSecondsPerGiB"`
	SpreadPercent  float64  `json:"spreadPercent"`
	Runs           []sample `json:"runs"`

	baselineName string
}

type goalResult struct {
	Goal string  `json:"goal"`
	Want float64 `json:"want"`
	// Ratio and Met are nil when either variant was not run.
	Ratio *float64 `json:"ratio"`
	Met   *bool    `json:"met"`
}

type report struct {
	Bytes    int64           `json:"bytes"`
	Runs     int             `json:"runs"`
	Variants []variantResult `json:"variants"`
	Goals    []goalResult    `json:"goals"`
}

// goals are the targets, checked against medians of the same run.
var goals = []struct {
	goal, variant, against string
	want                   float64
}{
	{"ferry plain >= 1.3x kubevirt-style", "ferry", "kubevirt", 1.3},
	{"ferry mTLS >= 1.3x kubevirt-style+TLS", "ferry-tls", "kubevirt-tls", 1.3},
}

// round keeps the JSON free of float noise like 0.9599999999991269.
func round(x float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(x*p) / p
}

func summarize(vs []variant, samples map[string][]sample, bytes int64, runs int) report {
	gib := float64(bytes) / (1 << 30)
	r := report{Bytes: bytes, Runs: runs}
	byKey := map[string]*variantResult{}
	for _, v := range vs {
		ss := samples[v.key]
		var mibps, relay, host []float64
		for _, s := range ss {
			mibps = append(mibps, s.MiBps)
			relay = append(relay, (s.SourceCPU+s.TargetCPU)/gib)
			host = append(host, s.HostCPU/gib)
		}
		m := benchstat.Of(mibps).Median
		r.Variants = append(r.Variants, variantResult{Key: v.key, Name: v.name, Conns: v.conns, Baseline: v.baseline,
			MiBps: round(m, 1), RelayCPUPerGiB: round(benchstat.Of(relay).Median, 3), HostCPUPerGiB: round(benchstat.Of(host).Median, 3),
			SpreadPercent: round((slices.Max(mibps)-slices.Min(mibps))/m*100, 1), Runs: ss})
	}
	for i := range r.Variants {
		byKey[r.Variants[i].Key] = &r.Variants[i]
	}
	ratio := func(key, against string) *float64 {
		a, b := byKey[key], byKey[against]
		if a == nil || b == nil {
			return nil
		}
		x := round(a.MiBps/b.MiBps, 3)
		return &x
	}
	for i := range r.Variants {
		v := &r.Variants[i]
		v.XRaw = ratio(v.Key, "raw")
		v.XBaseline = ratio(v.Key, v.Baseline)
		if b := byKey[v.Baseline]; b != nil {
			v.baselineName = b.Name
		}
	}
	for _, g := range goals {
		x := ratio(g.variant, g.against)
		gr := goalResult{Goal: g.goal, Want: g.want, Ratio: x}
		if x != nil {
			met := *x >= g.want
			gr.Met = &met
		}
		r.Goals = append(r.Goals, gr)
	}
	return r
}

func (r report) writeText(w io.Writer) {
	fmt.Fprintf(w, "proxy throughput, %s over a veth, median of %d\n", sizeText(r.Bytes), r.Runs)
	const row = "%-20s %7s %7s %11s %16s %15s %7s  %s\n"
	fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf(row, "variant", "MiB/s", "x raw", "x kubevirt", "relay CPU s/GiB", "host CPU s/GiB", "spread", ""), " \n"))
	for _, v := range r.Variants {
		note := ""
		if v.Baseline != "kubevirt" && v.baselineName != "" {
			note = "(x kubevirt: vs " + v.baselineName + ")"
		}
		line := fmt.Sprintf(row, v.Name, fmt.Sprintf("%.0f", v.MiBps), ratioText(v.XRaw), ratioText(v.XBaseline),
			fmt.Sprintf("%.2f", v.RelayCPUPerGiB), fmt.Sprintf("%.2f", v.HostCPUPerGiB), fmt.Sprintf("%.0f%%", v.SpreadPercent), note)
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}
	fmt.Fprintln(w, "relay CPU: utime+stime of both relay processes (and their forks) per GiB moved;")
	fmt.Fprintln(w, "host CPU: the whole machine's busy time per GiB (writer, sink, kernel and anything else running);")
	fmt.Fprintln(w, "spread: (max-min)/median of MiB/s over the runs.")
	fmt.Fprintln(w, "\ngoals (informational):")
	for _, g := range r.Goals {
		state := "not measured"
		if g.Ratio != nil {
			state = fmt.Sprintf("not met (%.2fx)", *g.Ratio)
			if *g.Met {
				state = fmt.Sprintf("met (%.2fx)", *g.Ratio)
			}
		}
		fmt.Fprintf(w, "  %-40s %s\n", g.Goal, state)
	}
}

func ratioText(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *x)
}

func sizeText(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
