package measure

import (
	"testing"

	"github.com/ferry-vm/ferry/api"
)

// The figures of three guests measured on the test bed, each with one
// reading taken while the guests booted.
func TestEstimateIsNotMovedByOneOddReading(t *testing.T) {
	for _, c := range []struct {
		readings []uint64
		want     uint64
	}{
		{[]uint64{38, 17, 16, 20, 15}, 17},
		{[]uint64{71, 33, 34, 32, 25}, 33},
		{[]uint64{16, 60, 67, 64, 65}, 64},
		{[]uint64{99, 99, 10, 12}, 55},
		{nil, 0},
	} {
		var h []api.DirtyRate
		for _, r := range c.readings {
			h = append(h, api.DirtyRate{BytesPerSecond: r})
		}
		if got := Estimate(h); got != c.want {
			t.Errorf("Estimate(%v) = %d, want %d", c.readings, got, c.want)
		}
	}
}
