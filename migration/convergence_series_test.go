package migration

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// Pass starts as the tracker records them for a 512 MiB guest under a
// memory-dirtying load, each read by the first poll in its pass (so a little
// below the true start), with the latest reading taken later in the pass.
func TestAssessRecordedSeries(t *testing.T) {
	cases := []struct {
		name            string
		dirty, transfer uint64 // MiB/s
		starts          []float64
		nowMiB          float64
		want            api.Verdict
		wantETA         bool
		reason          string
		etaMin, etaMax  float64 // seconds, when wantETA
	}{
		{name: "32 MiB/s dirty on 130 MiB/s: pass 3 fits", dirty: 32, transfer: 130,
			starts: []float64{511.2, 98.6, 23.1}, nowMiB: 23.1,
			want: api.VerdictConverging, wantETA: true, reason: "switch-over imminent", etaMax: 0.3},
		{name: "32 MiB/s dirty on 40 MiB/s: shrinks to the switch-over", dirty: 32, transfer: 40,
			starts: []float64{510.8, 281.2, 182.9, 126.4, 92.5}, nowMiB: 71.0,
			want: api.VerdictConverging, wantETA: true, reason: "~6 passes", etaMin: 5, etaMax: 8},
		// Each pass leaves 83-86 % of the previous one: slow, still converging.
		{name: "64 MiB/s dirty on 70 MiB/s: slow shrink", dirty: 64, transfer: 70,
			starts: []float64{511.5, 305.9, 215.2, 163.1, 129.8, 105.4, 88.0, 74.9, 63.6}, nowMiB: 41.0,
			want: api.VerdictConverging, wantETA: true, reason: "~7 passes", etaMin: 2, etaMax: 6},
		{name: "64 MiB/s dirty on 100 MiB/s: at the threshold", dirty: 64, transfer: 100,
			starts: []float64{511.0, 241.3, 133.0, 78.4, 47.6, 29.9}, nowMiB: 29.9,
			want: api.VerdictConverging, wantETA: true, reason: "switch-over imminent", etaMax: 0.3},
		// The guest dirties faster than the link sends: remaining settles on
		// a working set of about 190 MiB, shrinking by well under 1 % a pass.
		{name: "64 MiB/s dirty on 40 MiB/s: settles on a working set", dirty: 64, transfer: 40,
			starts: []float64{511.4, 280.1, 232.5, 213.0, 203.9, 198.6, 196.2, 194.7, 193.9}, nowMiB: 120.0,
			want: api.VerdictStalled, reason: "would need ~"},
		{name: "max dirty rate on 130 MiB/s: the whole working set every pass", dirty: 2048, transfer: 130,
			starts: []float64{511.7, 383.2, 384.0, 383.6, 383.9}, nowMiB: 301.5,
			want: api.VerdictStalled, reason: "does not shrink"},
		{name: "dirtying picks up mid-migration", dirty: 256, transfer: 100,
			starts: []float64{511.9, 64.0, 121.5, 229.8, 418.0}, nowMiB: 380.2,
			want: api.VerdictDiverging, reason: "grows"},
		// The same slow shrink with pass 7 never read: the verdict stands on
		// the ratios left.
		{name: "64 MiB/s dirty on 70 MiB/s with an unread pass", dirty: 64, transfer: 70,
			starts: []float64{511.5, 305.9, 215.2, 163.1, 129.8, 105.4, 0, 74.9, 63.6}, nowMiB: 41.0,
			want: api.VerdictConverging, wantETA: true, etaMin: 2, etaMax: 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var it []iteration
			for i, s := range c.starts {
				it = append(it, pass(uint64(i+1), s, s > 0)) // 0: never read
			}
			a := Assess(it, Figures{RemainingBytes: uint64(c.nowMiB * mib), MemoryTotalBytes: 512 * mib,
				TransferBps: c.transfer * mib, DirtyBps: c.dirty * mib, MaxDowntime: DefaultMaxDowntime})
			if a.Verdict != c.want || !strings.Contains(a.Reason, c.reason) {
				t.Fatalf("%s (%s), want %s with %q", a.Verdict, a.Reason, c.want, c.reason)
			}
			if (a.ETA != nil) != c.wantETA {
				t.Fatalf("ETA %v, want present=%v (%s)", a.ETA, c.wantETA, a.Reason)
			}
			if a.ETA != nil && (*a.ETA < c.etaMin || *a.ETA > c.etaMax || math.IsNaN(*a.ETA)) {
				t.Fatalf("ETA %.2fs, want %.1f-%.1fs (%s)", *a.ETA, c.etaMin, c.etaMax, a.Reason)
			}
			t.Logf("%s: %s, ETA %v", a.Verdict, a.Reason, fmtETA(a.ETA))
		})
	}
}

func fmtETA(s *float64) string {
	if s == nil {
		return "none"
	}
	return time.Duration(*s * float64(time.Second)).Round(10 * time.Millisecond).String()
}
