package migration

import (
	"math"
	"testing"
)

// Pass starts of a 512 MiB guest dirtying 64 MiB/s on a 70 MiB/s link, as
// the tracker recorded them on the test bed (TestAssessRecordedSeries),
// each pass read at its start, a third and two thirds through: every new
// pass finds more left than the last reading of the one before, so the raw
// share sent drops at each pass.
func TestProgressNeverGoesDownAcrossPasses(t *testing.T) {
	f := newFeed(t, "a")
	starts := []uint64{511, 306, 215, 163, 130, 105, 88, 75, 64}
	prev, lastRaw, rawDrops := 0.0, 0.0, 0
	for i, s := range starts {
		n := uint64(i + 1)
		if n > 1 {
			f.iteration(int32(n))
			if j := f.job(); j.PassBytes != 0 {
				t.Fatalf("pass %d opened with the last pass's size %d", n, j.PassBytes)
			}
		}
		for _, rem := range []uint64{s, s * 2 / 3, s / 3} {
			f.stats(outgoing(n, rem))
			j := f.job()
			raw := 100 - 100*float64(rem)/512
			if raw < lastRaw {
				rawDrops++
			}
			lastRaw = raw
			if j.ProgressPercent < prev {
				t.Fatalf("pass %d, %d MiB left: progress went down from %.1f%% to %.1f%%", n, rem, prev, j.ProgressPercent)
			}
			if j.ProgressPercent != max(prev, raw) {
				t.Fatalf("pass %d, %d MiB left: progress %.2f%%, want %.2f%%", n, rem, j.ProgressPercent, max(prev, raw))
			}
			prev = j.ProgressPercent
			wantPass := 100 * float64(s-rem) / float64(s)
			if j.Iteration != n || j.PassBytes != s<<20 || math.Abs(j.PassPercent-wantPass) > 1e-9 {
				t.Fatalf("pass %d, %d MiB left: pass %d at %.1f%% of %d, want %.1f%% of %d", n, rem, j.Iteration, j.PassPercent, j.PassBytes, wantPass, s<<20)
			}
		}
	}
	if rawDrops < len(starts)-1 {
		t.Fatalf("the raw share dropped %d times; the series does not exercise a new pass", rawDrops)
	}
}

// A real migration of 17 passes recorded on the test bed, replayed: the raw
// share sent drops at most new passes, the job's progress never does.
func TestRecordedMultiPassProgressNeverGoesDown(t *testing.T) {
	rec, err := LoadRecordedJob("testdata/multipass-job.json")
	if err != nil {
		t.Fatal(err)
	}
	f := newFeed(t, "a")
	prev, lastRaw, rawDrops, passes := 0.0, 0.0, 0, map[uint64]bool{}
	for _, s := range rec.Samples {
		// As the sampler feeds a reading: asked and got at once.
		f.tr.feedStats(sock, running(1), rec.Stats(s), f.tick())
		j := f.job()
		raw := 100 - 100*float64(s.DataRemainingBytes)/float64(rec.DataTotalBytes)
		if raw < lastRaw {
			rawDrops++
		}
		lastRaw = raw
		if j.ProgressPercent < prev {
			t.Fatalf("pass %d at %d ms: progress went down from %.1f%% to %.1f%%", s.Iteration, s.ElapsedMs, prev, j.ProgressPercent)
		}
		prev = j.ProgressPercent
		passes[j.Iteration] = true
		if j.PassBytes < s.MemoryRemainingBytes || j.PassPercent < 0 || j.PassPercent > 100 {
			t.Fatalf("pass %d: %.1f%% of %d with %d left", j.Iteration, j.PassPercent, j.PassBytes, s.MemoryRemainingBytes)
		}
	}
	if rawDrops < 5 || len(passes) < 10 {
		t.Fatalf("recording has %d raw drops over %d passes; it does not show passes starting over", rawDrops, len(passes))
	}
}
