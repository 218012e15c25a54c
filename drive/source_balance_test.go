package drive

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

func TestNearerItsSwitchOver(t *testing.T) {
	t0 := time.Now()
	first := api.Job{Mode: api.ModePreCopy, Iteration: 1, MemoryRemainingBytes: 10, StartTime: t0}
	older := api.Job{Mode: api.ModePreCopy, Iteration: 1, MemoryRemainingBytes: 900, StartTime: t0.Add(-time.Second)}
	late := api.Job{Mode: api.ModePreCopy, Iteration: 5, MemoryRemainingBytes: 300, StartTime: t0}
	later := api.Job{Mode: api.ModePreCopy, Iteration: 3, MemoryRemainingBytes: 100, StartTime: t0}
	split := api.Job{Mode: api.ModePostCopy, Iteration: 2, MemoryRemainingBytes: 5000, StartTime: t0}
	for _, c := range []struct {
		name string
		a, b api.Job
	}{
		{"post-copy before anything", split, later},
		{"past the first pass before in it, however little is left", late, first},
		{"less left, both past the first pass", later, late},
		{"the older, both in their first pass", older, first},
	} {
		if !nearer(c.a, c.b) || nearer(c.b, c.a) {
			t.Errorf("%s: nearer(a, b) %v, nearer(b, a) %v", c.name, nearer(c.a, c.b), nearer(c.b, c.a))
		}
	}
}

// The lead's share cannot wrap below zero, however many share the link.
func TestShareNeverUnderflows(t *testing.T) {
	s := &Source{cfg: SourceConfig{LinkBytesPerSecond: 8 << 20}, slots: newSlots(2)}
	for n := 1; n <= 40; n++ {
		tr := s.trickle(n)
		if tr == 0 || tr > s.linkMiBs() {
			t.Fatalf("%d running: trickle %d MiB/s of a %d MiB/s link", n, tr, s.linkMiBs())
		}
	}
	if got := s.startingShare(); got != 8 {
		t.Fatalf("a lone migration starts at %d MiB/s, want the whole link (8)", got)
	}
}
