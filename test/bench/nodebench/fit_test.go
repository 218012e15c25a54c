package main

import (
	"errors"
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestFitLineRecoversAnExactLine(t *testing.T) {
	// 0.3 % of a core at rest, 0.02 more a launcher.
	xs := []float64{0, 10, 30, 60}
	var ys []float64
	for _, x := range xs {
		ys = append(ys, 0.3+0.02*x)
	}
	l, err := fitLine(xs, ys)
	if err != nil {
		t.Fatal(err)
	}
	if !near(l.Intercept, 0.3) || !near(l.Slope, 0.02) || !near(l.R2, 1) || l.Points != 4 {
		t.Errorf("line %+v, want 0.3 + 0.02x with r² 1 over 4 points", l)
	}
	if !near(l.at(110), 2.5) || !near(l.at(250), 5.3) {
		t.Errorf("at 110 %v, at 250 %v; want 2.5 and 5.3", l.at(110), l.at(250))
	}
}

func TestFitLineIsLeastSquares(t *testing.T) {
	// Points around y = 1 + 2x; the least-squares line through (0,1),
	// (1,3.5), (2,4.5) is 1.25 + 1.75x: its residuals sum to 0.
	l, err := fitLine([]float64{0, 1, 2}, []float64{1, 3.5, 4.5})
	if err != nil {
		t.Fatal(err)
	}
	if !near(l.Intercept, 1.25) || !near(l.Slope, 1.75) {
		t.Errorf("line %+v, want 1.25 + 1.75x", l)
	}
	if l.R2 <= 0.9 || l.R2 >= 1 {
		t.Errorf("r² %v, want a good but not exact fit", l.R2)
	}
}

func TestFitLineOfAFlatFigure(t *testing.T) {
	l, err := fitLine([]float64{0, 10, 60}, []float64{7, 7, 7})
	if err != nil || l.Slope != 0 || l.Intercept != 7 || l.R2 != 1 {
		t.Errorf("line %+v (%v), want flat at 7 with r² 1", l, err)
	}
}

func TestFitLineNeedsTwoCounts(t *testing.T) {
	for _, xs := range [][]float64{nil, {10}, {10, 10}} {
		ys := make([]float64, len(xs))
		if _, err := fitLine(xs, ys); !errors.Is(err, errTooFewCounts) {
			t.Errorf("counts %v: %v, want errTooFewCounts", xs, err)
		}
	}
	if _, err := fitLine([]float64{1, 2}, []float64{1}); err == nil {
		t.Error("mismatched lengths fitted")
	}
}
