package migration

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/units"
)

// The verdict asks QEMU's own question: pre-copy switches over as soon as
// what is left can be sent within the allowed downtime at the current
// bandwidth. Until it can, the question is whether the memory left dirty at
// the start of each pass shrinks fast enough to get there. That is read
// across passes, never across polls: remaining falls within every pass
// whatever the guest does, so two polls inside one pass say nothing (the
// reason Nova dropped its poll-based progress rule).
const (
	divergingRatio = 1.2
	// A pass start is read by whichever poll comes first in the pass, so one
	// ratio can be off; the median of the last few is not moved by one.
	ratioWindow = 3
	// maxPasses is how far a projection is trusted. Past it the per-pass
	// ratio is so close to 1 that reading noise decides the answer: with ten
	// times the threshold left, 30 passes is a ratio of 0.93, where a 1 %
	// error in the ratio moves the projection by 14 %; at 0.98 (114 passes)
	// it moves it by half. (KubeVirt's stall detector likewise counts
	// remaining within 4 % of its earlier low as no progress.)
	maxPasses = 30
)

// A shrink ratio of at least pinnedRatio, beyond what the rates explain by
// a margin (rates predict less than pinnedSlack of it), is a working set
// the guest re-dirties whole within every pass.
const (
	pinnedRatio  = 0.85
	pinnedSlack  = 0.75
	stoppedRatio = 0.97
)

// passRates is dirty/transfer, the larger of its value at the start of the
// latest pass (the rates the ratios were made under) and now: a pass is
// called pinned only when no reading of the rates explains it. ok=false
// until QEMU has measured a dirty rate at all.
func passRates(iters []iteration, f Figures) (float64, bool) {
	r, ok := 0.0, false
	if n := len(iters); n > 0 && iters[n-1].sampled && iters[n-1].DirtyRateBytesPerSecond > 0 && iters[n-1].TransferRateBytesPerSecond > 0 {
		r, ok = float64(iters[n-1].DirtyRateBytesPerSecond)/float64(iters[n-1].TransferRateBytesPerSecond), true
	}
	if f.DirtyBps > 0 && f.TransferBps > 0 {
		r, ok = max(r, float64(f.DirtyBps)/float64(f.TransferBps)), true
	}
	return r, ok
}

// Assessment is the convergence verdict with its reason and an ETA.
type Assessment struct {
	Verdict api.Verdict
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
	// ExpectedDowntime is libvirt's estimate of the stop-and-copy (job
	// stats "downtime" while the job is active); zero when not reported.
	ExpectedDowntime time.Duration
}

// Assess judges a pre-copy job from its iterations and latest figures.
func Assess(iters []iteration, f Figures) Assessment {
	maxDowntime := f.MaxDowntime
	if maxDowntime <= 0 {
		maxDowntime = DefaultMaxDowntime
	}
	left, transfer := float64(f.RemainingBytes), float64(f.TransferBps)
	threshold := transfer * maxDowntime.Seconds()
	figures := fmt.Sprintf("%s left, threshold %s (%v at the transfer rate); dirty %s/s vs transfer %s/s",
		units.IEC(f.RemainingBytes), units.IEC(bytesOf(threshold)), maxDowntime, units.IEC(f.DirtyBps), units.IEC(f.TransferBps))

	// QEMU starts its expected downtime at the limit itself and only works
	// it out once it has measured a dirty rate, after the first pass; and
	// under TCG it was seen still reporting exactly the limit later, with
	// 436 MiB left against a 67 MiB threshold. Only a figure below the
	// limit is QEMU's own.
	expectedFits := f.ExpectedDowntime > 0 && f.DirtyBps > 0 && f.ExpectedDowntime < maxDowntime
	nothingLeft := f.RemainingBytes == 0 && f.MemoryTotalBytes > 0
	// Judge from the start of the current pass, not from the reading: late
	// in every pass what is left drops below the threshold, and QEMU then
	// syncs its dirty bitmap, finds the pages dirtied meanwhile, and goes
	// on (seen: 158 MiB left against 176 MiB mid-pass, 384 MiB after).
	start := left
	if n := len(iters); n > 0 && iters[n-1].sampled {
		start = max(start, float64(iters[n-1].MemoryRemainingBytes))
	}
	if expectedFits || nothingLeft || (f.TransferBps > 0 && start <= threshold) {
		var t float64
		if expectedFits {
			t = f.ExpectedDowntime.Seconds()
		} else if f.TransferBps > 0 {
			t = left / transfer
		}
		reason := "fits the allowed downtime, switch-over imminent: "
		if expectedFits {
			reason += fmt.Sprintf("expected downtime %v, allowed %v; ", f.ExpectedDowntime, maxDowntime)
		}
		return Assessment{Verdict: api.VerdictConverging, Reason: reason + figures, ETA: eta(t)}
	}

	ratios := passRatios(iters)
	if len(ratios) == 0 {
		a := Assessment{Verdict: api.VerdictUnknown, Reason: "needs two iterations after the first full pass; " + figures}
		if f.TransferBps > f.DirtyBps {
			a.ETA = eta(left / float64(f.TransferBps-f.DirtyBps))
		}
		return a
	}
	// The median keeps one mis-read pass start from moving the verdict; two
	// last passes that both stopped shrinking say the guest has stopped.
	m := Median(ratios)
	if n := len(ratios); n >= 2 && min(ratios[n-1], ratios[n-2]) >= stoppedRatio {
		m = max(m, min(ratios[n-1], ratios[n-2]))
	}
	switch {
	case m >= divergingRatio:
		return Assessment{Verdict: api.VerdictDiverging, Reason: fmt.Sprintf("grows %s per pass; %s", growth(m), figures)}
	case m >= 1:
		return Assessment{Verdict: api.VerdictStalled,
			Reason: fmt.Sprintf("does not shrink: each pass leaves %s of the previous one; %s", pct(m), figures)}
	case f.TransferBps == 0:
		return Assessment{Verdict: api.VerdictStalled,
			Reason: fmt.Sprintf("nothing is being sent, though each pass left %s of the previous one; %s", pct(m), figures)}
	}

	// A pass that leaves far more than the guest could dirty while it ran
	// (dirty/transfer of what it started with) is pinned at the guest's
	// working set: the guest re-dirties all of it within a pass, so passes
	// stop shrinking there. Seen: passes of 429, 385, 384 ... 385 MiB at
	// dirty 185 vs transfer 485 MiB/s, for 492 passes.
	if r, ok := passRates(iters, f); ok && m >= pinnedRatio && r < m*pinnedSlack {
		return Assessment{Verdict: api.VerdictStalled, Reason: fmt.Sprintf(
			"each pass re-sends the guest's working set (~%s): it leaves %s of the previous one where the rates alone would leave %s; %s",
			units.IEC(bytesOf(start)), pct(m), pct(r), figures)}
	}
	passes, fits := PassesToFit(start, threshold, m)
	if !fits {
		return Assessment{Verdict: api.VerdictStalled, Reason: fmt.Sprintf("shrinks %s per pass, would need ~%.0f passes to fit the allowed downtime; %s",
			pct(1-m), passes, figures)}
	}
	// The rest of this pass, then the passes to come.
	t := left/transfer + PassesSeconds(start, transfer, m, passes)
	return Assessment{Verdict: api.VerdictConverging, ETA: eta(t),
		Reason: fmt.Sprintf("shrinks %s per pass, fits the allowed downtime in ~%.0f passes; %s", pct(1-m), passes, figures)}
}

// PassesToFit is how many more pre-copy passes it takes until what a
// pass leaves fits threshold, when the pass under way started with start
// bytes and each leaves a share m of the one before; fits is false past
// maxPasses (or when passes do not shrink), where the projection is no
// longer trusted. The policy's verdict and the prediction of a migration
// not yet started both read pre-copy this way.
func PassesToFit(start, threshold, m float64) (passes float64, fits bool) {
	if start <= threshold {
		return 0, true
	}
	if m >= 1 {
		return math.Inf(1), false
	}
	passes = math.Ceil(math.Log(threshold/start) / math.Log(m))
	if !(passes >= 1) { // m == 0: the next pass leaves nothing
		passes = 1
	}
	return passes, passes <= maxPasses
}

// PassesSeconds is how long those passes take at transfer bytes/s: they
// start at start*m^k, and the last is the stop-and-copy.
func PassesSeconds(start, transfer, m, passes float64) float64 {
	if passes == 0 || transfer <= 0 {
		return 0
	}
	if m == 1 {
		return start / transfer * passes
	}
	return start / transfer * m * (1 - math.Pow(m, passes)) / (1 - m)
}

// passRatios are the last ratios of memory left dirty between consecutive
// passes from pass 2 on. A ratio across a pass nobody read would be two
// passes' worth. A pass read at 0 gives none either way: it fit already (and
// the current reading says so), or its one read came at its very end.
func passRatios(iters []iteration) []float64 {
	var r []float64
	for i := 1; i < len(iters); i++ {
		a, b := iters[i-1], iters[i]
		if a.Number < 2 || b.Number != a.Number+1 || !a.sampled || !b.sampled ||
			a.MemoryRemainingBytes == 0 || b.MemoryRemainingBytes == 0 {
			continue
		}
		r = append(r, float64(b.MemoryRemainingBytes)/float64(a.MemoryRemainingBytes))
	}
	return r[max(0, len(r)-ratioWindow):]
}

func pct(x float64) string {
	if x < 0.0001 {
		return "under 0.01 %"
	}
	if x < 0.01 {
		return fmt.Sprintf("%.2g %%", x*100)
	}
	return fmt.Sprintf("%.0f %%", x*100)
}

func growth(m float64) string {
	if m < 10 {
		return pct(m - 1)
	}
	return fmt.Sprintf("%.0fx", m)
}

// bytesOf clamps a byte count worked out in floating point.
func bytesOf(b float64) uint64 {
	if b >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(max(b, 0))
}

func eta(s float64) *float64 {
	if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return nil
	}
	return &s
}

// Median is the middle of v (the mean of the two middle values when v has
// an even length); v is not changed.
func Median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
