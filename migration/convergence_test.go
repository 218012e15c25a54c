package migration

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

const mib = 1 << 20

func iters(remainingMiB ...uint64) []iteration {
	var out []iteration
	t0 := time.Unix(0, 0)
	for i, r := range remainingMiB {
		out = append(out, iteration{Iteration: api.Iteration{Number: uint64(i + 1), Start: t0.Add(time.Duration(i) * time.Second),
			MemoryRemainingBytes: r << 20, DirtyRateBytesPerSecond: 10 << 20, TransferRateBytesPerSecond: 100 << 20}, sampled: true})
	}
	return out
}

// pass is iteration n as the tracker keeps it: an unread pass has no figures.
func pass(n uint64, startMiB float64, sampled bool) iteration {
	it := iteration{Iteration: api.Iteration{Number: n, Start: time.Unix(int64(n), 0)}, sampled: sampled}
	if sampled {
		it.MemoryRemainingBytes = uint64(startMiB * mib)
	}
	return it
}

func TestAssess(t *testing.T) {
	cases := []struct {
		name      string
		remaining []uint64
		want      api.Verdict
		wantETA   bool
	}{
		{"first pass only", []uint64{512}, api.VerdictUnknown, true},
		{"one ratio after the first pass is not enough", []uint64{512, 200}, api.VerdictUnknown, true},
		{"shrinking", []uint64{512, 200, 80, 30}, api.VerdictConverging, true},
		{"working set saturates", []uint64{512, 380, 384, 379, 383}, api.VerdictStalled, false},
		{"growing", []uint64{512, 100, 150, 240}, api.VerdictDiverging, false},
		// The first pass always shrinks a lot; it must not make a stalled
		// migration look converging.
		{"first pass ignored", []uint64{512, 300, 300}, api.VerdictStalled, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := iters(c.remaining...)
			last := it[len(it)-1]
			a := Assess(it, Figures{RemainingBytes: last.MemoryRemainingBytes, MemoryTotalBytes: 512 << 20, TransferBps: 100 << 20, DirtyBps: 10 << 20, MaxDowntime: DefaultMaxDowntime})
			if a.Verdict != c.want {
				t.Fatalf("verdict %s (%s), want %s", a.Verdict, a.Reason, c.want)
			}
			if (a.ETA != nil) != c.wantETA {
				t.Fatalf("ETA %v, want present=%v", a.ETA, c.wantETA)
			}
			if a.Reason == "" {
				t.Fatal("verdict without a reason")
			}
		})
	}
}

func TestAssessETAGeometric(t *testing.T) {
	it := iters(512, 256, 128, 64)
	a := Assess(it, Figures{RemainingBytes: 64 << 20, TransferBps: 64 << 20, MaxDowntime: DefaultMaxDowntime})
	// Threshold 19.2 MiB. The 64 MiB of this pass take 1 s, the next pass
	// 32 MiB 0.5 s, and the 16 MiB after it fit: the stop-and-copy, 0.25 s.
	if a.Verdict != api.VerdictConverging || a.ETA == nil || math.Abs(*a.ETA-1.75) > 0.01 {
		t.Fatalf("%s ETA %v (%s), want Converging in 1.75s", a.Verdict, a.ETA, a.Reason)
	}
}

func TestAssessIgnoresUnsampledIterations(t *testing.T) {
	// Read, the last iteration would make it Diverging (100 -> 900); it was
	// never read, so its figure must not count.
	it := iters(512, 300, 100, 900)
	it[3].sampled = false
	a := Assess(it, Figures{RemainingBytes: 90 * mib, TransferBps: 100 * mib, DirtyBps: 10 * mib, MaxDowntime: DefaultMaxDowntime})
	if a.Verdict != api.VerdictConverging {
		t.Fatalf("verdict %s (%s), want Converging from the sampled iterations", a.Verdict, a.Reason)
	}
}

func TestAssessRatiosOnlyBetweenConsecutivePasses(t *testing.T) {
	// Each pass leaves 115 % of the previous one: a stall. Across a pass
	// nobody read, the ratio is two passes' worth (132 %) and reads as
	// diverging.
	f := Figures{RemainingBytes: 402 * mib, MemoryTotalBytes: 512 * mib, TransferBps: 100 * mib, DirtyBps: 150 * mib, MaxDowntime: DefaultMaxDowntime}
	for name, it := range map[string][]iteration{
		"missing": {pass(1, 512, true), pass(2, 200, true), pass(3, 230, true), pass(5, 304, true), pass(7, 402, true)},
		"unread":  {pass(1, 512, true), pass(2, 200, true), pass(3, 230, true), pass(4, 0, false), pass(5, 304, true), pass(6, 0, false), pass(7, 402, true)},
	} {
		if a := Assess(it, f); a.Verdict != api.VerdictStalled {
			t.Errorf("%s passes: verdict %s (%s), want Stalled", name, a.Verdict, a.Reason)
		}
	}
}

func TestAssessZeroRemaining(t *testing.T) {
	f := Figures{MemoryTotalBytes: 512 * mib, TransferBps: 100 * mib, MaxDowntime: DefaultMaxDowntime}

	// An idle guest: pass 1 left nothing dirty, so pass 2 already fits.
	a := Assess([]iteration{pass(1, 512, true), pass(2, 0, true)}, f)
	if a.Verdict != api.VerdictConverging || a.ETA == nil || *a.ETA != 0 {
		t.Errorf("nothing left: %s ETA %v (%s), want Converging now", a.Verdict, a.ETA, a.Reason)
	}

	// Pass 3 was read at 0 (at the end of a short pass); pass 4 at 50 MiB.
	// Growth from nothing is no ratio at all, let alone 5 million per cent.
	f.RemainingBytes, f.DirtyBps = 50*mib, 40*mib
	a = Assess([]iteration{pass(1, 512, true), pass(2, 200, true), pass(3, 0, true), pass(4, 50, true)}, f)
	if a.Verdict == api.VerdictDiverging {
		t.Errorf("growth from 0: verdict %s (%s)", a.Verdict, a.Reason)
	}
	for _, p := range percents(a.Reason) {
		if p > 1000 {
			t.Errorf("growth from 0: absurd percentage in %q", a.Reason)
		}
	}

	// A zero read amid a stall makes neither a 0 % nor an infinite ratio.
	f.RemainingBytes = 290 * mib
	a = Assess([]iteration{pass(1, 512, true), pass(2, 300, true), pass(3, 0, true), pass(4, 280, true), pass(5, 290, true)}, f)
	if a.Verdict != api.VerdictStalled {
		t.Errorf("zero read in a stall: verdict %s (%s), want Stalled", a.Verdict, a.Reason)
	}
}

func TestAssessSlowShrinkIsNotStalled(t *testing.T) {
	// Each pass leaves 85 % of the previous one: from 123 MiB, 9 more
	// passes reach the 30 MiB threshold.
	it := iters(512, 200, 170, 145, 123)
	a := Assess(it, Figures{RemainingBytes: 123 * mib, MemoryTotalBytes: 512 * mib, TransferBps: 100 * mib, DirtyBps: 85 * mib, MaxDowntime: DefaultMaxDowntime})
	if a.Verdict != api.VerdictConverging || a.ETA == nil {
		t.Fatalf("verdict %s ETA %v (%s), want Converging with an ETA", a.Verdict, a.ETA, a.Reason)
	}
	for _, want := range []string{"shrinks 15 % per pass", "~9 passes", "123.0 MiB left", "threshold 30.0 MiB", "dirty 85.0 MiB/s vs transfer 100.0 MiB/s"} {
		if !strings.Contains(a.Reason, want) {
			t.Errorf("reason %q lacks %q", a.Reason, want)
		}
	}
}

func TestAssessProjectionBound(t *testing.T) {
	// 200 MiB left against a 12 MiB threshold (40 MiB/s, 300 ms).
	f := Figures{RemainingBytes: 200 * mib, MemoryTotalBytes: 512 * mib, TransferBps: 40 * mib, DirtyBps: 38 * mib, MaxDowntime: DefaultMaxDowntime}
	geometric := func(m float64) []iteration {
		start := 200 / (m * m * m)
		return []iteration{pass(1, 512, true), pass(2, start, true), pass(3, start*m, true), pass(4, start*m*m, true), pass(5, 200, true)}
	}
	a := Assess(geometric(0.9), f)
	if a.Verdict != api.VerdictConverging || a.ETA == nil || !strings.Contains(a.Reason, "~27 passes") {
		t.Errorf("90 %% per pass: %s ETA %v (%s), want Converging in ~27 passes", a.Verdict, a.ETA, a.Reason)
	}
	a = Assess(geometric(0.95), f)
	if a.Verdict != api.VerdictStalled || a.ETA != nil || !strings.Contains(a.Reason, "shrinks 5 % per pass, would need ~55 passes") {
		t.Errorf("95 %% per pass: %s ETA %v (%s), want Stalled needing ~55 passes", a.Verdict, a.ETA, a.Reason)
	}
}

func TestAssessFitsTheAllowedDowntime(t *testing.T) {
	flat := iters(512, 384, 385, 384)
	f := Figures{RemainingBytes: 384 * mib, MemoryTotalBytes: 512 * mib, DirtyBps: 1 << 30, MaxDowntime: DefaultMaxDowntime}

	// 384 MiB at 2 GiB/s is 188 ms: QEMU switches over however flat the
	// series, so this is no stall.
	f.TransferBps = 2 << 30
	if a := Assess(flat, f); a.Verdict != api.VerdictConverging || !strings.Contains(a.Reason, "switch-over imminent") {
		t.Errorf("2 GiB/s: %s (%s), want Converging, switch-over imminent", a.Verdict, a.Reason)
	}
	// At 1 GiB/s each pass is short too (375 ms) and nearly fits, but QEMU
	// needs it to fit 300 ms and the working set never shrinks: a stall,
	// however fast the link.
	f.TransferBps = 1 << 30
	if a := Assess(flat, f); a.Verdict != api.VerdictStalled {
		t.Errorf("1 GiB/s: %s (%s), want Stalled", a.Verdict, a.Reason)
	}
}

func TestAssessExpectedDowntime(t *testing.T) {
	flat := iters(512, 60, 61, 60)
	f := Figures{RemainingBytes: 60 * mib, MemoryTotalBytes: 512 * mib, TransferBps: 100 * mib, DirtyBps: 90 * mib, MaxDowntime: DefaultMaxDowntime}

	// libvirt's estimate of the stop-and-copy is within the limit: QEMU is
	// switching over even though the bandwidth reading says 60 MiB > 30 MiB.
	f.ExpectedDowntime = 250 * time.Millisecond
	a := Assess(flat, f)
	if a.Verdict != api.VerdictConverging || a.ETA == nil || *a.ETA != 0.25 || !strings.Contains(a.Reason, "expected downtime 250ms") {
		t.Errorf("expected 250ms: %s ETA %v (%s), want Converging in 0.25s", a.Verdict, a.ETA, a.Reason)
	}
	f.ExpectedDowntime = 450 * time.Millisecond
	if a := Assess(flat, f); a.Verdict != api.VerdictStalled {
		t.Errorf("expected 450ms: %s (%s), want Stalled", a.Verdict, a.Reason)
	}

	// QEMU reports the limit itself as expected downtime until it has
	// measured a dirty rate: in pass 1 that says nothing.
	a = Assess(iters(512), Figures{RemainingBytes: 400 * mib, MemoryTotalBytes: 512 * mib, TransferBps: 100 * mib,
		MaxDowntime: DefaultMaxDowntime, ExpectedDowntime: DefaultMaxDowntime})
	if a.Verdict != api.VerdictUnknown {
		t.Errorf("pass 1: %s (%s), want Unknown", a.Verdict, a.Reason)
	}
}

func TestAssessReasonsCarryFigures(t *testing.T) {
	f := Figures{RemainingBytes: 240 * mib, MemoryTotalBytes: 512 * mib, TransferBps: 100 * mib, DirtyBps: 180 * mib, MaxDowntime: DefaultMaxDowntime}
	a := Assess(iters(512, 100, 150, 240), f)
	for _, want := range []string{"grows 55 % per pass", "240.0 MiB left", "threshold 30.0 MiB", "dirty 180.0 MiB/s vs transfer 100.0 MiB/s"} {
		if !strings.Contains(a.Reason, want) {
			t.Errorf("reason %q lacks %q", a.Reason, want)
		}
	}
}

func TestAssessNeverNaNOrNegativeETA(t *testing.T) {
	const huge = math.MaxUint64
	seriesCases := [][]iteration{nil, iters(512), iters(512, 0, 0, 0), iters(512, 200, 80, 30), iters(512, 380, 384, 379),
		iters(512, 100, 150, 240), iters(512, 200, 170, 145, 123),
		{pass(1, 512, true), pass(2, 1, true), pass(3, 0, true)},
		{pass(1, 0, true), {Iteration: api.Iteration{Number: 2, MemoryRemainingBytes: huge}, sampled: true}, pass(3, 1.0/mib, true), {Iteration: api.Iteration{Number: 4, MemoryRemainingBytes: huge}, sampled: true}},
	}
	figures := []Figures{
		{},
		{RemainingBytes: 100 * mib, MemoryTotalBytes: 512 * mib},
		{RemainingBytes: 100 * mib, DirtyBps: 50 * mib},
		{RemainingBytes: 100 * mib, TransferBps: 1, DirtyBps: 1},
		{RemainingBytes: huge, MemoryTotalBytes: huge, TransferBps: huge, DirtyBps: huge, MaxDowntime: math.MaxInt64},
		{RemainingBytes: huge, TransferBps: 1, MaxDowntime: time.Nanosecond},
		{RemainingBytes: 1, TransferBps: huge, MaxDowntime: -time.Second},
		{RemainingBytes: huge, TransferBps: huge, DirtyBps: 1, ExpectedDowntime: math.MaxInt64},
	}
	for i, it := range seriesCases {
		for j, f := range figures {
			a := Assess(it, f)
			if a.ETA != nil && (*a.ETA < 0 || math.IsNaN(*a.ETA) || math.IsInf(*a.ETA, 0)) {
				t.Errorf("series %d figures %d: ETA %v", i, j, *a.ETA)
			}
			if a.Reason == "" || strings.Contains(a.Reason, "NaN") || strings.Contains(a.Reason, "Inf") || negative.MatchString(a.Reason) {
				t.Errorf("series %d figures %d: %s reason %q", i, j, a.Verdict, a.Reason)
			}
		}
	}
	if a := Assess(nil, Figures{}); a.Verdict != api.VerdictUnknown || a.ETA != nil {
		t.Errorf("no figures at all: %s ETA %v (%s), want Unknown without ETA", a.Verdict, a.ETA, a.Reason)
	}
	// Nothing moving: no time to finish can be given.
	a := Assess(iters(512, 200, 120, 70), Figures{RemainingBytes: 70 * mib, MemoryTotalBytes: 512 * mib, DirtyBps: 10 * mib, MaxDowntime: DefaultMaxDowntime})
	if a.Verdict != api.VerdictStalled || a.ETA != nil || !strings.Contains(a.Reason, "nothing is being sent") {
		t.Errorf("zero transfer rate: %s ETA %v (%s), want Stalled without ETA", a.Verdict, a.ETA, a.Reason)
	}
}

var (
	percentRE = regexp.MustCompile(`([0-9.]+) %`)
	negative  = regexp.MustCompile(`-[0-9]`)
)

func percents(s string) []float64 {
	var out []float64
	for _, m := range percentRE.FindAllStringSubmatch(s, -1) {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil {
			out = append(out, v)
		}
	}
	return out
}

func TestAssessExpectedDowntimeEqualToTheLimitIsNotEvidence(t *testing.T) {
	// Seen on the test bed: QEMU still reporting its initial figure (the
	// limit itself) mid-migration, with far more left than fits.
	a := Assess(nil, Figures{RemainingBytes: 436 << 20, MemoryTotalBytes: 512 << 20, TransferBps: 224 << 20,
		DirtyBps: 196 << 20, MaxDowntime: 300 * time.Millisecond, ExpectedDowntime: 300 * time.Millisecond})
	if a.Verdict == api.VerdictConverging {
		t.Fatalf("verdict %s (%s): the limit echoed back is not an estimate", a.Verdict, a.Reason)
	}
}

// Recorded on the test bed: a 384 MiB working set re-dirtied at full speed
// never converged (492 passes at 383-385 MiB), yet its first passes shrank.
func TestAssessEarlyShrinkOfAStallIsNotConvergence(t *testing.T) {
	its := []iteration{
		{Iteration: api.Iteration{Number: 1, MemoryRemainingBytes: 511 << 20}, sampled: true},
		{Iteration: api.Iteration{Number: 2, MemoryRemainingBytes: 429 << 20}, sampled: true},
		{Iteration: api.Iteration{Number: 3, MemoryRemainingBytes: 385 << 20}, sampled: true},
		{Iteration: api.Iteration{Number: 4, MemoryRemainingBytes: 384 << 20}, sampled: true},
	}
	// Mid-pass, what is left has dropped below the threshold (144 MiB).
	a := Assess(its, Figures{RemainingBytes: 130 << 20, MemoryTotalBytes: 512 << 20, TransferBps: 479 << 20,
		DirtyBps: 194 << 20, MaxDowntime: 300 * time.Millisecond})
	if a.Verdict == api.VerdictConverging {
		t.Fatalf("verdict %s (%s), want a stall", a.Verdict, a.Reason)
	}
	// By pass 3 one ratio (0.90) is known, far above what the rates allow
	// (dirty/transfer 0.40): the passes are pinned at the working set.
	its[2].DirtyRateBytesPerSecond, its[2].TransferRateBytesPerSecond = 176<<20, 550<<20
	a = Assess(its[:3], Figures{RemainingBytes: 385 << 20, MemoryTotalBytes: 512 << 20, TransferBps: 485 << 20,
		DirtyBps: 194 << 20, MaxDowntime: 300 * time.Millisecond})
	if a.Verdict != api.VerdictStalled || !strings.Contains(a.Reason, "working set") {
		t.Fatalf("at pass 3: verdict %s (%s), want Stalled at the working set", a.Verdict, a.Reason)
	}
}
