package migration

import (
	"testing"
	"time"
)

func iters(remainingMiB ...uint64) []Iteration {
	var out []Iteration
	t0 := time.Unix(0, 0)
	for i, r := range remainingMiB {
		out = append(out, Iteration{Number: uint64(i + 1), Start: t0.Add(time.Duration(i) * time.Second),
			MemoryRemainingBytes: r << 20, DirtyRateBytesPerSecond: 10 << 20, TransferRateBytesPerSecond: 100 << 20, sampled: true})
	}
	return out
}

func TestAssess(t *testing.T) {
	cases := []struct {
		name      string
		remaining []uint64
		want      Verdict
		wantETA   bool
	}{
		{"first pass only", []uint64{512}, VerdictUnknown, true},
		{"one ratio after the first pass is not enough", []uint64{512, 200}, VerdictUnknown, true},
		{"shrinking", []uint64{512, 200, 80, 30}, VerdictConverging, true},
		{"working set saturates", []uint64{512, 380, 384, 379, 383}, VerdictStalled, false},
		{"growing", []uint64{512, 100, 150, 240}, VerdictDiverging, false},
		// The first pass always shrinks a lot; it must not make a stalled
		// migration look converging.
		{"first pass ignored", []uint64{512, 300, 300}, VerdictStalled, false},
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
	// 64 MiB at 64 MiB/s with each pass halving: 1 s * 1/(1-0.5) = 2 s.
	if a.ETA == nil || *a.ETA < 1.99 || *a.ETA > 2.01 {
		t.Fatalf("ETA %v, want 2s", a.ETA)
	}
}

func TestAssessIgnoresUnsampledIterations(t *testing.T) {
	// Read, the last iteration would make it Diverging (100 -> 900); it was
	// never sampled, so its figure must not count.
	it := iters(512, 300, 100, 900)
	it[3].sampled = false
	if a := Assess(it, Figures{TransferBps: 1, MaxDowntime: DefaultMaxDowntime}); a.Verdict != VerdictConverging {
		t.Fatalf("verdict %s, want Converging from the sampled iterations", a.Verdict)
	}
}

func TestAssessFlatTailBeforeSwitchOverIsNotStalled(t *testing.T) {
	it := iters(512, 40, 34, 32, 31)
	a := Assess(it, Figures{RemainingBytes: 31 << 20, MemoryTotalBytes: 512 << 20, TransferBps: 96 << 20, DirtyBps: 64 << 20, MaxDowntime: DefaultMaxDowntime})
	if a.Verdict != VerdictConverging {
		t.Fatalf("verdict %s (%s): 31 MiB at 96 MiB/s is the last pass before a 300ms switch-over", a.Verdict, a.Reason)
	}
	// A big working set on a fast link: each pass is short, but it never shrinks.
	a = Assess(iters(512, 384, 385, 384), Figures{RemainingBytes: 384 << 20, MemoryTotalBytes: 512 << 20, TransferBps: 2 << 30, DirtyBps: 1 << 30, MaxDowntime: DefaultMaxDowntime})
	if a.Verdict != VerdictStalled {
		t.Fatalf("verdict %s: 384 MiB of 512 re-dirtied every pass is a stall, however fast the link", a.Verdict)
	}
}
