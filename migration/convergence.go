package migration

import (
	"fmt"
	"sort"
	"time"

	"github.com/ferry-vm/ferry/internal/units"
)

// Thresholds on the per-iteration ratio of memory left dirty. A pre-copy
// pass sends what the previous one left dirty; if each pass leaves less, the
// migration converges. The verdict is read across iterations, never across
// consecutive polls: two polls a second apart inside one pass say nothing
// about convergence (the reason Nova dropped its poll-based progress rule).
const (
	convergingRatio = 0.8
	divergingRatio  = 1.2
	ratioWindow     = 3
)

// Assessment is the convergence verdict with its reason and an ETA.
type Assessment struct {
	Verdict Verdict
	Reason  string
	ETA     *float64
}

// DefaultMaxDowntime is libvirt's default allowed downtime for the final
// stop-and-copy, used until the domain's own setting is known.
const DefaultMaxDowntime = 300 * time.Millisecond

// Figures are the latest readings a verdict is judged with.
type Figures struct {
	RemainingBytes   uint64
	MemoryTotalBytes uint64
	TransferBps      uint64
	DirtyBps         uint64
	// MaxDowntime is the migration's allowed downtime: pre-copy switches
	// over once what is left can be sent within it.
	MaxDowntime time.Duration
}

// Assess judges a pre-copy job from its iterations and latest figures.
func Assess(iters []Iteration, f Figures) Assessment {
	remaining, transferBps, dirtyBps, maxDowntime := f.RemainingBytes, f.TransferBps, f.DirtyBps, f.MaxDowntime
	// Pass 1 starts with all of memory remaining; it says nothing about
	// how fast the guest dirties pages, so the series starts at pass 2.
	var series []Iteration
	for _, it := range iters {
		if it.Number >= 2 && it.sampled {
			series = append(series, it)
		}
	}
	if len(series) > ratioWindow+1 {
		series = series[len(series)-ratioWindow-1:]
	}
	if len(series) < 2 {
		a := Assessment{Verdict: VerdictUnknown, Reason: "needs two iterations after the first full pass"}
		if transferBps > dirtyBps {
			a.ETA = eta(float64(remaining) / float64(transferBps-dirtyBps))
		}
		return a
	}
	ratios := make([]float64, 0, len(series)-1)
	for i := 1; i < len(series); i++ {
		prev := float64(series[i-1].MemoryRemainingBytes)
		if prev == 0 {
			prev = 1
		}
		ratios = append(ratios, float64(series[i].MemoryRemainingBytes)/prev)
	}
	m := median(ratios)
	last := series[len(series)-1]
	rates := fmt.Sprintf("dirty %s/s vs transfer %s/s", units.IEC(last.DirtyRateBytesPerSecond), units.IEC(last.TransferRateBytesPerSecond))
	switch {
	case m <= convergingRatio:
		a := Assessment{Verdict: VerdictConverging,
			Reason: fmt.Sprintf("each iteration leaves %.0f%% of the previous one dirty (%s)", m*100, rates)}
		if transferBps > 0 {
			// The passes still to come form a geometric series.
			a.ETA = eta(float64(remaining) / float64(transferBps) / (1 - m))
		}
		return a
	case m >= divergingRatio:
		return Assessment{Verdict: VerdictDiverging,
			Reason: fmt.Sprintf("memory left dirty grows %.0f%% per iteration (%s)", (m-1)*100, rates)}
	case transferBps > 0 && float64(remaining)/float64(transferBps) <= 1.5*maxDowntime.Seconds() &&
		(f.MemoryTotalBytes == 0 || remaining*10 <= f.MemoryTotalBytes):
		// A flat tail this small is the last passes before the switch-over,
		// not a stall: what is left nearly fits in the allowed downtime. A
		// large working set re-sent quickly on a fast link is still a stall.
		return Assessment{Verdict: VerdictConverging, ETA: eta(1.5 * maxDowntime.Seconds()),
			Reason: fmt.Sprintf("%s left, about to fit the %v allowed downtime (%s)", units.IEC(remaining), maxDowntime, rates)}
	default:
		return Assessment{Verdict: VerdictStalled,
			Reason: fmt.Sprintf("memory left dirty stays at %s per iteration (%s)", units.IEC(last.MemoryRemainingBytes), rates)}
	}
}

func eta(s float64) *float64 {
	if s < 0 || s != s {
		return nil
	}
	return &s
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
