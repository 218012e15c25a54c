package main

import (
	"errors"
	"math"
)

// line is a least-squares line through a figure's values at the counts
// measured: Intercept is what ferryd costs with no launcher, Slope what
// each launcher adds. A node of 110 (KubeVirt's default pod limit) or 250
// launchers cannot be run here, so the line says what it would cost if
// the cost stays linear; R2 says how well a line fits at all.
type line struct {
	Intercept float64 `json:"intercept"`
	Slope     float64 `json:"slope"`
	R2        float64 `json:"r2"`
	Points    int     `json:"points"`
}

func (l line) at(x float64) float64 { return l.Intercept + l.Slope*x }

var errTooFewCounts = errors.New("a line needs values at two different counts")

// fitLine is ordinary least squares of ys on xs.
func fitLine(xs, ys []float64) (line, error) {
	if len(xs) != len(ys) {
		return line{}, errors.New("as many counts as values needed")
	}
	n := float64(len(xs))
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	var sxx, sxy, syy float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if len(xs) < 2 || sxx == 0 {
		return line{}, errTooFewCounts
	}
	l := line{Slope: sxy / sxx, Points: len(xs)}
	l.Intercept = my - l.Slope*mx
	// A figure that does not move at all is fitted exactly by its flat line.
	l.R2 = 1
	if syy > 0 {
		l.R2 = sxy * sxy / (sxx * syy)
	}
	if math.IsNaN(l.Slope) || math.IsNaN(l.Intercept) {
		return line{}, errors.New("values are not numbers")
	}
	return l, nil
}
