package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// The job's event kinds and wording a recovery shows (migration/recovery.go).
const (
	kindPaused   = "postcopy-paused"
	kindRecovery = "recovery"
	resumedWords = "resumed the migration"
)

// firstEvent is the first event of that kind at or after t.
func firstEvent(evs []api.Event, kind string, t time.Time) (api.Event, bool) {
	for _, e := range evs {
		if e.Kind == kind && !e.Time.Before(t) {
			return e, true
		}
	}
	return api.Event{}, false
}

// resume is a recovery attempt that resumed the migration, as its job
// event tells it.
type resume struct {
	At      time.Time
	Attempt int
	// Took is Ferry's own figure: from its resume request to the stream
	// going on; zero if the detail did not say.
	Took time.Duration
}

// firstResume is the first resumed recovery attempt at or after t.
func firstResume(evs []api.Event, t time.Time) (resume, bool) {
	for _, e := range evs {
		if e.Kind != kindRecovery || e.Time.Before(t) || !strings.Contains(e.Detail, resumedWords) {
			continue
		}
		r := resume{At: e.Time}
		r.Attempt, r.Took, _ = parseResumed(e.Detail)
		return r, true
	}
	return resume{}, false
}

// parseResumed reads "attempt N resumed the migration D after the resume".
func parseResumed(detail string) (int, time.Duration, error) {
	var n int
	var took string
	if _, err := fmt.Sscanf(detail, "attempt %d resumed the migration %s after the resume", &n, &took); err != nil {
		return 0, 0, fmt.Errorf("recovery event %q: %w", detail, err)
	}
	d, err := time.ParseDuration(took)
	if err != nil {
		return n, 0, fmt.Errorf("recovery event %q: %w", detail, err)
	}
	return n, d, nil
}
