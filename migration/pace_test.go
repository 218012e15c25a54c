package migration

import (
	"testing"
	"time"
)

// An idle socket's sampler sleeps to its next read, six intervals at
// most, reads its jobs at each and lists it at the sixtieth; an event
// wakes it to every interval, and so does anything in flight.
func TestPaceSleepsToTheNextRead(t *testing.T) {
	const iv = time.Second
	start := time.Unix(1000, 0)
	p := newPace(iv, start)
	p.jobsAt, p.sweptAt = start, start
	now := start
	var reads, sweeps, wakes int
	for now.Before(start.Add(120 * iv)) {
		w := p.wait(now, false)
		if w < iv || w > idleReadTicks*iv {
			t.Fatalf("at %v idle, sleeps %v; want between one and six intervals", now.Sub(start), w)
		}
		now = now.Add(w)
		wakes++
		switch whole, jobs := p.next(now, false); {
		case whole:
			sweeps++
		case jobs:
			reads++
		}
	}
	if wakes != 20 || sweeps != 2 || reads != 18 {
		t.Errorf("120 idle intervals: woke %d times, swept %d, read jobs %d; want 20, 2, 18", wakes, sweeps, reads)
	}
	if w := p.wait(now, true); w != iv {
		t.Errorf("busy: sleeps %v; want the interval", w)
	}
	p.wake(now)
	if w := p.wait(now, false); w != iv {
		t.Errorf("just woken: sleeps %v; want the interval", w)
	}
	if whole, _ := p.next(now.Add(iv), false); !whole {
		t.Error("an interval after an event: not read whole")
	}
	later := now.Add(awakeTicks * iv)
	p.next(later, false)
	if w := p.wait(later, false); w <= iv {
		t.Errorf("%d intervals after the event, having read: sleeps %v, still every interval", awakeTicks, w)
	}
}
