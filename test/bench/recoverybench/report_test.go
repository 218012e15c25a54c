package main

import (
	"strings"
	"testing"
)

func TestSummaryLineAgainstTheGoal(t *testing.T) {
	runs := []runResult{
		{Scenario: "reset", OK: true, RunningSeconds: 0.8},
		{Scenario: "reset", OK: true, RunningSeconds: 1.0},
		{Scenario: "reset", Failure: "the migration did not complete", RunningSeconds: 40},
		{Scenario: "reset", OK: true, RunningSeconds: 1.4},
	}
	got := summaryLine("reset", runs, 2)
	for _, want := range []string{"median time from the path's return to the guest running again: 1.00 s (goal: under 2 s)", "0.50x of the 2 s goal", "under the goal", "3 of 4 runs timed", "min 0.80 s, max 1.40 s"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	slow := summaryLine("cut", []runResult{{OK: true, RunningSeconds: 3}}, 2)
	if !strings.Contains(slow, "1.50x of the 2 s goal, misses the goal") {
		t.Errorf("summary %q does not say it misses the goal", slow)
	}
	none := summaryLine("cut", []runResult{{Failure: "x"}}, 2)
	if !strings.Contains(none, "no run completed and verified (0 of 1)") {
		t.Errorf("summary %q does not say nothing was timed", none)
	}
}

func TestReportTimesOnlyVerifiedRuns(t *testing.T) {
	var b strings.Builder
	rs := []runResult{
		{Scenario: "cut", Run: 1, Guest: "rb-cut-1", OK: true, ResumedSeconds: 0.5, RunningSeconds: 1.2, PauseSeconds: 15.3, DetectSeconds: 31, ResumeAttempt: 1, ChecksAfter: 9},
		{Scenario: "cut", Run: 2, Guest: "rb-cut-2", Failure: "the source job ended PostCopyFailed: a|b", RunningSeconds: 99},
	}
	report(&b, settings{Accel: "TCG", CutHoldSeconds: 45, GoalSeconds: 2}, []string{"reset", "cut"}, rs)
	out := b.String()
	for _, want := range []string{"accelerator TCG (software emulation", "| 2 | rb-cut-2 | failed: the source job ended PostCopyFailed: a/b | - |", "| median | | 1 of 2 timed | 0.50 | 1.20 | 15.30 | 31.0 |", "cut: median time"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "99") || strings.Contains(out, "\nreset:") {
		t.Errorf("report shows a failed run's figure or an empty scenario:\n%s", out)
	}
}
