// Package benchstat sums up a benchmark's figure over repeated runs, the
// same way in every bench, so their reports read alike.
package benchstat

import (
	"fmt"
	"sort"
)

// Spread is a figure over repeated runs.
type Spread struct {
	N                int
	Median, Min, Max float64
}

// Of sorts a copy: callers keep their figures in the order run.
func Of(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return Spread{N: len(s), Median: median(s), Min: s[0], Max: s[len(s)-1]}
}

// median of sorted figures; the mean of the middle two for an even count,
// so two runs do not report whichever happened to sort first.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// Text prints the median, and min-max when there was more than one run.
func (s Spread) Text(format string) string {
	if s.N == 0 {
		return "-"
	}
	m := fmt.Sprintf(format, s.Median)
	if s.N == 1 {
		return m
	}
	return m + " (" + fmt.Sprintf(format, s.Min) + "-" + fmt.Sprintf(format, s.Max) + ")"
}
