package main

import (
	"testing"
	"time"
)

func TestMonitorSwitchesToPostCopyAtTheDeadlineWhenAllowed(t *testing.T) {
	for _, pc := range []bool{true, false} {
		m := newMonitor(completionDeadline(512, 150*time.Second), pc)
		if m.deadline != 75*time.Second {
			t.Fatalf("deadline of a 512 MiB guest at 150 s/GiB: %v, want 75s", m.deadline)
		}
		// Remaining keeps falling, so there is progress, but too slowly.
		var got move
		var at time.Duration
		for s := time.Duration(0); s <= 80*time.Second; s += 400 * time.Millisecond {
			if mv := m.observe(s, uint64(400<<20)-uint64(s/time.Second)<<20); mv != keep {
				got, at = mv, s
				break
			}
		}
		want := abortDeadline
		if pc {
			want = switchPostCopy
		}
		if got != want || at <= 75*time.Second || at > 76*time.Second {
			t.Errorf("post-copy %v: %v at %v, want %v just past 75s", pc, got, at, want)
		}
		if mv := m.observe(90*time.Second, 1); mv != keep {
			t.Errorf("a second move after the first: %v", mv)
		}
	}
}

func TestMonitorAbortsWithoutProgressBeforeTheDeadline(t *testing.T) {
	m := newMonitor(10*time.Minute, true)
	m.observe(0, 300<<20)
	m.observe(10*time.Second, 200<<20) // the low watermark
	for s := 11 * time.Second; s < 170*time.Second; s += time.Second {
		if mv := m.observe(s, 250<<20); mv != keep {
			if mv != abortNoProgress || s-10*time.Second <= kubevirtProgressTimeout {
				t.Fatalf("%v at %v, want abort on no progress just past 150 s after the low watermark", mv, s)
			}
			return
		}
	}
	t.Fatal("no abort after 150 s without a new low of data remaining")
}
