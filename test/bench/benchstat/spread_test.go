package benchstat

import "testing"

func TestOfMedianOddAndEven(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want Spread
		text string
	}{
		{nil, Spread{}, "-"},
		{[]float64{1.5}, Spread{1, 1.5, 1.5, 1.5}, "1.5"},
		{[]float64{9.8}, Spread{1, 9.8, 9.8, 9.8}, "9.8"},
		{[]float64{3, 1, 2}, Spread{3, 2, 1, 3}, "2.0 (1.0-3.0)"},
		{[]float64{12, 9, 10}, Spread{3, 10, 9, 12}, "10.0 (9.0-12.0)"},
		{[]float64{4, 1, 3, 2}, Spread{4, 2.5, 1, 4}, "2.5 (1.0-4.0)"},
		{[]float64{0.9, 0.4, 1.7, 0.6, 1.1}, Spread{5, 0.9, 0.4, 1.7}, "0.9 (0.4-1.7)"},
	} {
		got := Of(c.xs)
		if got != c.want || got.Text("%.1f") != c.text {
			t.Errorf("%v: %+v %q, want %+v %q", c.xs, got, got.Text("%.1f"), c.want, c.text)
		}
	}
}

func TestOfLeavesItsArgument(t *testing.T) {
	xs := []float64{3, 1, 2}
	Of(xs)
	if xs[0] != 3 {
		t.Error("Of sorted its argument in place")
	}
}
