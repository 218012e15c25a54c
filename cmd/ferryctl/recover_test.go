package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

func TestRecoveryShowsTheCountdownWhilePaused(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	j := api.Job{Role: api.RoleSource, Phase: api.PhasePostCopyPaused, Recovery: &api.Recovery{Until: now.Add(3*time.Minute + 12*time.Second), Attempts: 2, LastError: "asking the target: refused"}}
	got := recoveryString(j, now)
	for _, want := range []string{"overdue in 3m12s", "2 attempts, 0 resumed", "last: asking the target: refused", "ferryctl recover"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	j.Phase, j.Recovery.Resumed = api.PhaseCompleted, 2
	if got := recoveryString(j, now); strings.Contains(got, "overdue") || !strings.Contains(got, "2 resumed") {
		t.Errorf("after the end: %q", got)
	}
}

func TestRecoveryPastItsTimeoutSaysOverdueAndGoesOn(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	j := api.Job{Role: api.RoleSource, Phase: api.PhasePostCopyPaused, Recovery: &api.Recovery{Until: now.Add(-time.Minute), Overdue: true, Attempts: 40}}
	got := recoveryString(j, now)
	for _, want := range []string{"OVERDUE since", "tried on until resumed or given up", "40 attempts"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
