package plan

import (
	"math"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

const mib = 1 << 20

func TestPredict(t *testing.T) {
	path := Path{BandwidthBytesPerSecond: 64 * mib, Setup: 2 * time.Second}
	limits := Limits{MaxDowntime: 300 * time.Millisecond}
	cases := []struct {
		name     string
		g        Guest
		l        Limits
		strategy string
		passes   int
		seconds  float64
	}{
		// 256 MiB at 64 MiB/s: 4 s; 0.5 MiB left fits 19.2 MiB at once.
		{"idle", Guest{MemoryBytes: 512 * mib, ResidentBytes: 256 * mib, DirtyBytesPerSecond: mib / 8}, limits, api.StrategyPreCopy, 2, 2 + 4 + 0.5/64},
		// Half a pass each time: 4 s, then 128, 64, 32 MiB (2, 1, 0.5 s),
		// then 16 MiB fits in the stop-and-copy (0.25 s).
		{"half", Guest{MemoryBytes: 256 * mib, DirtyBytesPerSecond: 32 * mib}, limits, api.StrategyPreCopy, 5, 2 + 4 + 2 + 1 + 0.5 + 0.25},
		{"faster than the link", Guest{MemoryBytes: 256 * mib, DirtyBytesPerSecond: 96 * mib}, limits, api.StrategyCannotMove, 1, 0},
		{"faster than the link, post-copy", Guest{MemoryBytes: 256 * mib, DirtyBytesPerSecond: 96 * mib}, Limits{MaxDowntime: 300 * time.Millisecond, AllowPostCopy: true},
			api.StrategyPostCopy, 1, 2 + 4 + 4},
	}
	for _, c := range cases {
		p := Predict(c.g, path, c.l)
		t.Logf("%s: %s", c.name, p.Reason)
		if p.Strategy != c.strategy || p.Passes != c.passes || math.Abs(p.Seconds-c.seconds) > 0.01 {
			t.Errorf("%s: %s in %d passes, %.2fs; want %s in %d, %.2fs", c.name, p.Strategy, p.Passes, p.Seconds, c.strategy, c.passes, c.seconds)
		}
		if p.Converges != (c.strategy == api.StrategyPreCopy) {
			t.Errorf("%s: converges %v with strategy %s", c.name, p.Converges, p.Strategy)
		}
	}
	if p := Predict(Guest{MemoryBytes: mib}, Path{}, limits); p.Strategy != api.StrategyCannotMove || p.Reason == "" {
		t.Errorf("no bandwidth known: %+v", p)
	}
}
