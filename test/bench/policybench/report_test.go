package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestGoalsJudgeEachCaseOnMedians(t *testing.T) {
	rs := []result{
		{Case: "hot", Policy: "none", Run: 1},
		{Case: "hot", Policy: "kubevirt-legacy", Run: 1, Complete: true, TotalSeconds: 80, Outcome: "post-copy", PauseMs: 90},
		{Case: "hot", Policy: "kubevirt-legacy", Run: 2, Complete: true, TotalSeconds: 90, Outcome: "post-copy", PauseMs: 95},
		{Case: "hot", Policy: "kubevirt-legacy", Run: 3, Complete: true, TotalSeconds: 70, Outcome: "post-copy", PauseMs: 99},
		// Ferry's median is 30 whatever the order: 30 / 80.
		{Case: "hot", Policy: "ferry", Run: 1, Complete: true, TotalSeconds: 40, Outcome: "post-copy", PauseMs: 120},
		{Case: "hot", Policy: "ferry", Run: 2, Complete: true, TotalSeconds: 30, Outcome: "post-copy", PauseMs: 510},
		{Case: "hot", Policy: "ferry", Run: 3, Complete: true, TotalSeconds: 20, Outcome: "pre-copy", DowntimeMs: 40, DowntimeFrom: "libvirt", PauseMs: 45},
		{Case: "calm", Policy: "none", Run: 1, Complete: true, TotalSeconds: 10},
		{Case: "calm", Policy: "kubevirt-legacy", Run: 1, Complete: true, TotalSeconds: 10, PauseMs: 40},
		{Case: "calm", Policy: "ferry", Run: 1, Complete: true, TotalSeconds: 12},
		{Case: "stuck", Policy: "none", Run: 1},
		{Case: "stuck", Policy: "kubevirt-legacy", Run: 1, Complete: true, TotalSeconds: 80, PauseMs: 100},
		{Case: "stuck", Policy: "ferry", Run: 1, Complete: true, TotalSeconds: 25, PauseMs: 100},
		{Case: "stuck", Policy: "ferry", Run: 2, TotalSeconds: 13, Outcome: "failed NotConverging"},
	}
	var g goals
	if !isHard(rs, "hot", 48) || isHard(rs, "calm", 48) {
		t.Fatal("hard is where libvirt's defaults did not finish")
	}
	if cell := g.judge(rs, guestCase{Name: "hot"}, true, 500); cell != "0.38" {
		t.Errorf("hot: %s, want 30/80 of the medians", cell)
	}
	if cell := g.judge(rs, guestCase{Name: "calm"}, false, 500); cell != "1.20" {
		t.Errorf("calm: %s", cell)
	}
	// The ratio stands on the completed run; the failed one is counted.
	if cell := g.judge(rs, guestCase{Name: "stuck"}, true, 500); cell != "0.31" {
		t.Errorf("stuck: %s", cell)
	}
	if len(g.slowHard) != 0 || len(g.slowEasy) != 1 {
		t.Errorf("ratios: %+v", g)
	}
	if len(g.notCompleted) != 1 || g.notCompleted[0] != "stuck (1/2)" {
		t.Errorf("not completed: %q", g.notCompleted)
	}
	// A post-copy pause over the cap counts like a pre-copy one.
	if len(g.overDowntime) != 1 || g.overDowntime[0] != "hot run 2 (510 ms)" {
		t.Errorf("over the cap: %q", g.overDowntime)
	}
	if len(g.unmeasured) != 1 || g.unmeasured[0] != "calm run 1" {
		t.Errorf("unmeasured: %q", g.unmeasured)
	}
	// Neither the events nor libvirt gave calm's run a pause: the
	// downtime goal is not judged rather than met.
	if len(g.noDowntime) != 1 || g.noDowntime[0] != "calm run 1" {
		t.Errorf("no downtime at all: %q", g.noDowntime)
	}
	// A run over the cap is a miss, whatever else went unmeasured.
	var out strings.Builder
	g.print(&out, 500)
	if !strings.Contains(out.String(), "MISSED: hot run 2 (510 ms)") {
		t.Errorf("goals:\n%s", out.String())
	}
	out.Reset()
	(&goals{noDowntime: g.noDowntime}).print(&out, 500)
	if !strings.Contains(out.String(), "NOT JUDGED: no pause measured in calm run 1") {
		t.Errorf("goals:\n%s", out.String())
	}
	if g.worstPause != 510 {
		t.Errorf("worst pause %v", g.worstPause)
	}
}

func TestReportShowsMediansSpreadAndDisagreement(t *testing.T) {
	rs := []result{
		{Case: "over", Policy: "none", Run: 1, TotalSeconds: 76, Outcome: "failed Aborted"},
		{Case: "over", Policy: "kubevirt-legacy", Run: 1, Complete: true, TotalSeconds: 80, Outcome: "post-copy", PauseMs: 90, PostCopySeconds: 5},
		{Case: "over", Policy: "kubevirt-legacy", Run: 2, Complete: true, TotalSeconds: 79, Outcome: "post-copy", PauseMs: 80, PostCopySeconds: 4},
		{Case: "over", Policy: "kubevirt-legacy", Run: 3, TotalSeconds: 40, Outcome: "failed PostCopyFailed"},
		{Case: "over", Policy: "ferry", Run: 1, Complete: true, TotalSeconds: 18, Outcome: "post-copy", PauseMs: 70},
		{Case: "over", Policy: "ferry", Run: 2, Complete: true, TotalSeconds: 20, Outcome: "post-copy", PauseMs: 75},
		{Case: "over", Policy: "ferry", Run: 3, Complete: true, TotalSeconds: 16, Outcome: "pre-copy", PauseMs: 52, DowntimeMs: 40, DowntimeFrom: "libvirt"},
	}
	var out bytes.Buffer
	kinds := []policyKind{policies["none"], policies["kubevirt-legacy"], policies["ferry"]}
	report(&out, options{bandwidth: 48, postCopyBandwidth: 48, maxDowntimeMs: 500}, []guestCase{{Name: "over", Load: "over", MemoryMiB: 512}}, kinds, rs)
	text := out.String()
	for _, want := range []string{
		"runs per case: none 1, kubevirt-legacy 3, ferry 3 (of 3;",
		"| over | over | yes | - (0/1) | 79.5 (79.0-80.0), 2/3 completed | 18.0 (16.0-20.0) | 0.23 |",
		"| over | 512 / 0 / max | kubevirt-legacy | 3 | post-copy x2, failed PostCopyFailed x1 | 79.5 (79.0-80.0) | - | 85 (80-90) | 4.5 (4.0-5.0) |",
		"| ferry | 3 | post-copy x2, pre-copy x1 | 18.0 (16.0-20.0) | 40 | 70 (52-75) |",
		"event pause - libvirt downtime, 1 pre-copy completions: median +12.0 ms, from +12.0 to +12.0 ms",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}
