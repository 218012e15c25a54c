package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ferry-vm/ferry/test/bench/benchstat"
)

// runsOf are one case's runs under one policy, in the order run.
func runsOf(rs []result, c, p string) []result {
	var out []result
	for _, r := range rs {
		if r.Case == c && r.Policy == p {
			out = append(out, r)
		}
	}
	return out
}

func completed(rs []result) []result {
	var out []result
	for _, r := range rs {
		if r.Complete {
			out = append(out, r)
		}
	}
	return out
}

// totalOf is the total time over the completed runs, or over all runs
// when none completed (how long it took to fail).
func totalOf(rs []result) benchstat.Spread {
	use := completed(rs)
	if len(use) == 0 {
		use = rs
	}
	var xs []float64
	for _, r := range use {
		xs = append(xs, r.TotalSeconds)
	}
	return benchstat.Of(xs)
}

func field(rs []result, f func(result) (float64, bool)) benchstat.Spread {
	var xs []float64
	for _, r := range rs {
		if v, ok := f(r); ok {
			xs = append(xs, v)
		}
	}
	return benchstat.Of(xs)
}

// outcomeText counts the runs' outcomes, in the order first seen: "post-copy"
// when all agree, "pre-copy x2, post-copy x1" when not.
func outcomeText(rs []result) string {
	var order []string
	n := map[string]int{}
	for _, r := range rs {
		if n[r.Outcome] == 0 {
			order = append(order, r.Outcome)
		}
		n[r.Outcome]++
	}
	if len(order) == 1 {
		return order[0]
	}
	var parts []string
	for _, o := range order {
		parts = append(parts, fmt.Sprintf("%s x%d", o, n[o]))
	}
	return strings.Join(parts, ", ")
}

// medianRun is the completed run (any run if none completed) whose total
// time is the median, the lower of the middle two for an even count: the
// run whose steps stand for the rest.
func medianRun(rs []result) (result, bool) {
	use := completed(rs)
	if len(use) == 0 {
		use = rs
	}
	if len(use) == 0 {
		return result{}, false
	}
	s := append([]result(nil), use...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].TotalSeconds < s[j].TotalSeconds })
	return s[(len(s)-1)/2], true
}

// totalCell is a case's cell in the side-by-side table: the median total
// time of the completed runs and their spread, with the count of completed
// runs when not all completed.
func totalCell(rs []result) string {
	if len(rs) == 0 {
		return ""
	}
	done := completed(rs)
	if len(done) == 0 {
		return fmt.Sprintf("- (0/%d)", len(rs))
	}
	t := totalOf(done).Text("%.1f")
	if len(done) < len(rs) {
		t += fmt.Sprintf(", %d/%d completed", len(done), len(rs))
	}
	return t
}
