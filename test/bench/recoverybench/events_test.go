package main

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

func TestParseResumed(t *testing.T) {
	for _, c := range []struct {
		detail  string
		attempt int
		took    time.Duration
		bad     bool
	}{
		{"attempt 1 resumed the migration 412ms after the resume", 1, 412 * time.Millisecond, false},
		{"attempt 12 resumed the migration 1.25s after the resume", 12, 1250 * time.Millisecond, false},
		{"attempt 2 failed: dial tcp: connection refused", 0, 0, true},
		{"attempt 3 resumed the migration soon after the resume", 3, 0, true},
	} {
		n, took, err := parseResumed(c.detail)
		if n != c.attempt || took != c.took || (err != nil) != c.bad {
			t.Errorf("%q: %d %v %v, want %d %v error %v", c.detail, n, took, err, c.attempt, c.took, c.bad)
		}
	}
}

func TestFirstResumeSkipsFailedAttemptsAndEarlierEvents(t *testing.T) {
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	evs := []api.Event{
		{Time: t0, Kind: "mode", Detail: "post-copy"},
		{Time: t0.Add(1 * time.Second), Kind: "recovery", Detail: "attempt 1 resumed the migration 300ms after the resume"},
		{Time: t0.Add(5 * time.Second), Kind: "postcopy-paused", Detail: "post-copy broke"},
		{Time: t0.Add(6 * time.Second), Kind: "recovery", Detail: "attempt 1 failed: no route to host"},
		{Time: t0.Add(8 * time.Second), Kind: "recovery", Detail: "attempt 2 resumed the migration 650ms after the resume"},
	}
	p, ok := firstEvent(evs, kindPaused, t0)
	if !ok || !p.Time.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("firstEvent = %+v %v", p, ok)
	}
	r, ok := firstResume(evs, p.Time)
	if !ok || r.Attempt != 2 || r.Took != 650*time.Millisecond || !r.At.Equal(t0.Add(8*time.Second)) {
		t.Errorf("firstResume = %+v %v, want attempt 2 at +8s", r, ok)
	}
	if _, ok := firstResume(evs, t0.Add(9*time.Second)); ok {
		t.Error("firstResume found one after the last")
	}
}
