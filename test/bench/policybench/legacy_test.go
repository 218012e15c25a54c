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

func TestGoalsJudgeEachCase(t *testing.T) {
	rs := []result{
		{Case: "hot", Policy: "none"},
		{Case: "hot", Policy: "kubevirt-legacy", Complete: true, TotalSeconds: 80},
		{Case: "hot", Policy: "ferry", Complete: true, TotalSeconds: 30, DowntimeMs: 20},
		{Case: "calm", Policy: "none", Complete: true, TotalSeconds: 10},
		{Case: "calm", Policy: "kubevirt-legacy", Complete: true, TotalSeconds: 10},
		{Case: "calm", Policy: "ferry", Complete: true, TotalSeconds: 12, DowntimeMs: 600},
		{Case: "stuck", Policy: "none"},
		{Case: "stuck", Policy: "kubevirt-legacy", Complete: true, TotalSeconds: 80},
		{Case: "stuck", Policy: "ferry"},
	}
	var g goals
	if !isHard(rs, "hot") || isHard(rs, "calm") {
		t.Fatal("hard is where libvirt's defaults did not finish")
	}
	if cell := g.judge(rs, guestCase{Name: "hot"}, true, 500); cell != "0.38" {
		t.Errorf("hot: %s", cell)
	}
	if cell := g.judge(rs, guestCase{Name: "calm"}, false, 500); cell != "1.20" {
		t.Errorf("calm: %s", cell)
	}
	if cell := g.judge(rs, guestCase{Name: "stuck"}, true, 500); cell != "-" {
		t.Errorf("stuck: %s", cell)
	}
	if len(g.slowHard) != 0 || len(g.slowEasy) != 1 || len(g.overDowntime) != 1 || len(g.notCompleted) != 1 || g.notCompleted[0] != "stuck" {
		t.Errorf("goals: %+v", g)
	}
}
