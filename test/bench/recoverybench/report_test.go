package main

import (
	"strings"
	"testing"
)

func TestReportTimesOnlyVerifiedRuns(t *testing.T) {
	var b strings.Builder
	rs := []runResult{
		{Scenario: "cut", Run: 1, Guest: "rb-cut-1", OK: true, ResumedSeconds: 0.5, RunningSeconds: 1.2, PauseSeconds: 15.3, DetectSeconds: 31, ResumeAttempt: 1, ChecksAfter: 9},
		{Scenario: "cut", Run: 2, Guest: "rb-cut-2", Failure: "the source job ended PostCopyFailed: a|b", RunningSeconds: 99},
	}
	report(&b, settings{Accel: "TCG", CutHoldSeconds: 45, GoalSeconds: 2}, []string{"reset", "cut"}, rs)
	out := b.String()
	for _, want := range []string{"accelerator TCG (software emulation", "| 2 | rb-cut-2 | failed: the source job ended PostCopyFailed: a/b | - |", "| median | | 1 of 2 timed | 0.50 | 1.20 | 15.30 | 31.0 |",
		"cut: 1 of 2 runs timed; no unbroken baseline run", "resumed: cut median 0.50 s, 0.25x of the 2 s goal", "running again: cut 1.20 s; no unbroken run timed to compare with"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "99") || strings.Contains(out, "\nreset:") {
		t.Errorf("report shows a failed run's figure or an empty scenario:\n%s", out)
	}
}

func TestReportReadsBrokenRunsAgainstTheBaseline(t *testing.T) {
	var b strings.Builder
	rs := []runResult{
		{Scenario: "none", Run: 1, Guest: "rb-none-1", OK: true, RunningSeconds: 14.9, MigrationSeconds: 58, ChecksAfter: 40},
		{Scenario: "reset", Run: 1, Guest: "rb-reset-1", OK: true, ResumedSeconds: 0.42, RunningSeconds: 15.4, PauseSeconds: 15.4, MigrationSeconds: 62.1, ChecksAfter: 38},
	}
	report(&b, settings{Accel: "KVM", PostCopyBandwidthMiBs: 8, GoalSeconds: 2}, []string{"none", "reset"}, rs)
	out := b.String()
	for _, want := range []string{
		"| run | guest | result | running again s | migration s |",
		"| 1 | rb-none-1 | completed, memory whole (40 checks since the virtual break) | 14.90 | 58.0 |",
		"none (the unbroken baseline): 1 of 1 runs timed; medians: running again 14.90 s after the virtual break, migration 58.0 s",
		"reset: 1 of 1 runs timed, against 1 of 1 unbroken",
		"resumed: reset median 0.42 s, 0.21x of the 2 s goal, under the goal",
		"running again: reset 15.40 s vs 14.90 s unbroken (1.03x), +0.50 s",
		"migration: reset 62.1 s vs 58.0 s unbroken (1.07x), +4.1 s",
		"read against the unbroken baseline, not the goal",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
