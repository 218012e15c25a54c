package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

var mt0 = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return mt0.Add(time.Duration(n) * time.Millisecond) }

func recoveryEvents(pausedMs, resumedMs int) []api.Event {
	return []api.Event{
		{Time: ms(-3000), Kind: "mode", Detail: "post-copy"},
		{Time: ms(pausedMs), Kind: kindPaused, Detail: "post-copy broke"},
		{Time: ms(resumedMs), Kind: kindRecovery, Detail: "attempt 1 resumed the migration 250ms after the resume"},
	}
}

func TestMeasureReset(t *testing.T) {
	bt := breakTimes{Start: ms(0), Back: ms(0)}
	samples := []consoleSample{
		{ms(-2000), consoleCounts{Progress: 20, OK: 10}},
		// Printed after the reset, before QEMU paused: not the guest
		// running again.
		{ms(30), consoleCounts{Progress: 21, OK: 10}},
		{ms(1250), consoleCounts{Progress: 22, OK: 11}},
	}
	f, err := measure(bt, recoveryEvents(80, 900), samples)
	if err != nil {
		t.Fatal(err)
	}
	if f.ToResumed != 900*time.Millisecond || f.ToRunning != 1250*time.Millisecond || f.PauseTotal != 1250*time.Millisecond {
		t.Errorf("resumed %v, running %v, pause %v; want 900ms, 1.25s, 1.25s", f.ToResumed, f.ToRunning, f.PauseTotal)
	}
	if f.Baseline.Progress != 21 || f.Resume.Took != 250*time.Millisecond {
		t.Errorf("baseline %+v, resume %+v", f.Baseline, f.Resume)
	}
}

func TestMeasureCutCountsThePauseFromTheJob(t *testing.T) {
	// Cut at 0, paused at 31 s, link back at 45 s.
	bt := breakTimes{Start: ms(0), Back: ms(45000), PauseIsBreak: true}
	samples := []consoleSample{
		{ms(-500), consoleCounts{Progress: 30, OK: 15}},
		{ms(600), consoleCounts{Progress: 31, OK: 15}},
		{ms(46100), consoleCounts{Progress: 32, OK: 16}},
	}
	f, err := measure(bt, recoveryEvents(31000, 45700), samples)
	if err != nil {
		t.Fatal(err)
	}
	if f.ToResumed != 700*time.Millisecond || f.ToRunning != 1100*time.Millisecond || f.PauseTotal != 15100*time.Millisecond {
		t.Errorf("resumed %v, running %v, pause %v; want 700ms, 1.1s, 15.1s", f.ToResumed, f.ToRunning, f.PauseTotal)
	}
}

func TestMeasureSaysWhatIsMissing(t *testing.T) {
	bt := breakTimes{Start: ms(0), Back: ms(0)}
	before := []consoleSample{{ms(-100), consoleCounts{Progress: 5}}}
	for _, c := range []struct {
		name    string
		evs     []api.Event
		samples []consoleSample
		want    string
	}{
		{"no pause", recoveryEvents(-5000, -4000), before, "no postcopy-paused event"},
		{"no resume", recoveryEvents(100, -50), before, "no recovery attempt that resumed"},
		{"no reading", recoveryEvents(100, 800), []consoleSample{{ms(500), consoleCounts{Progress: 5}}}, "no reading of the guest's console"},
		{"no new line", recoveryEvents(100, 800), before, "no progress line"},
	} {
		_, err := measure(bt, c.evs, c.samples)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

func TestMeasureUnbrokenTimesFromTheVirtualBreak(t *testing.T) {
	bt := breakTimes{Start: ms(0), Back: ms(0)}
	samples := []consoleSample{
		{ms(-2000), consoleCounts{Progress: 20, OK: 10}},
		{ms(-10), consoleCounts{Progress: 21, OK: 10}},
		{ms(14900), consoleCounts{Progress: 22, OK: 11}},
	}
	evs := []api.Event{{Time: ms(-3000), Kind: "mode", Detail: "post-copy"}}
	f, err := measureUnbroken(bt, evs, samples)
	if err != nil {
		t.Fatal(err)
	}
	if f.ToRunning != 14900*time.Millisecond || f.Baseline.Progress != 21 || f.PauseTotal != 0 || !f.Resume.At.IsZero() {
		t.Errorf("%+v: want running 14.9 s from the reading of -10 ms, no pause or resume", f)
	}
	for _, c := range []struct {
		name    string
		evs     []api.Event
		samples []consoleSample
		want    string
	}{
		{"broke by itself", recoveryEvents(-1000, 500), samples, "broke by themselves"},
		{"no reading", evs, samples[2:], "no reading of the guest's console before the virtual break"},
		{"no new line", evs, samples[:2], "no progress line after the virtual break"},
	} {
		if _, err := measureUnbroken(bt, c.evs, c.samples); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
