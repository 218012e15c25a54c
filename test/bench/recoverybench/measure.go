package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// breakTimes are the bench's own clock around a break. Times are taken
// just before the bed's call, so each figure also holds the call's own
// time (the reset's `ss -K` and settle, the restore's `ip link set`):
// they err long, never short.
type breakTimes struct {
	// Start is when the bench broke the path; for the unbroken baseline,
	// when it would have (the virtual break), as is Back.
	Start time.Time
	// Back is when the path came back: for a reset its start, the path
	// being there again once the connections are gone; for a cut the
	// restore's.
	Back time.Time
	// PauseIsBreak says the break is the job's pause, not Start: a cut
	// breaks nothing until the proxy's TCP user timeout.
	PauseIsBreak bool
}

// figures are one run's timings, all on the host's one clock (ferryd's
// event times and the bench's readings).
type figures struct {
	Paused  time.Time
	Resume  resume
	Running consoleSample
	// Baseline is the console as it stood when the guest was held: at the
	// path's return, or at the pause if that came later (a reset is
	// noticed a moment after it).
	Baseline consoleCounts
	// ToResumed and ToRunning are from the path's return; PauseTotal
	// from the break.
	ToResumed, ToRunning, PauseTotal time.Duration
}

// measure reads a run's figures off the job's events and the console
// samples.
func measure(bt breakTimes, evs []api.Event, samples []consoleSample) (figures, error) {
	var f figures
	paused, ok := firstEvent(evs, kindPaused, bt.Start)
	if !ok {
		return f, errors.New("the source job shows no postcopy-paused event after the break: the streams did not break, or Ferry did not hold the migration paused")
	}
	f.Paused = paused.Time
	if f.Resume, ok = firstResume(evs, f.Paused); !ok {
		return f, errors.New("the source job shows no recovery attempt that resumed the migration")
	}
	// A line the guest printed after the reset but before QEMU paused
	// the migration is not the guest running again: counting starts from
	// the later of the path's return and the pause.
	base := bt.Back
	if f.Paused.After(base) {
		base = f.Paused
	}
	b, ok := sampleAt(samples, base)
	if !ok {
		return f, errors.New("no reading of the guest's console before the path came back")
	}
	f.Baseline = b.consoleCounts
	if f.Running, ok = firstGrowth(samples, base, f.Baseline); !ok {
		return f, errors.New("the guest printed no progress line after the path came back")
	}
	f.ToResumed = f.Resume.At.Sub(bt.Back)
	f.ToRunning = f.Running.At.Sub(bt.Back)
	from := bt.Start
	if bt.PauseIsBreak {
		from = f.Paused
	}
	f.PauseTotal = f.Running.At.Sub(from)
	return f, nil
}

// measureUnbroken reads the baseline's figures: "running again" as a
// broken run's, from the virtual break (bt.Back, the moment the others
// break) to the first new progress line after it. A run whose streams
// broke by themselves is no baseline.
func measureUnbroken(bt breakTimes, evs []api.Event, samples []consoleSample) (figures, error) {
	var f figures
	if p, ok := firstEvent(evs, kindPaused, time.Time{}); ok {
		return f, fmt.Errorf("the source job shows a postcopy-paused event at %s: the streams broke by themselves, so the run is no unbroken baseline", p.Time.Format("15:04:05.000"))
	}
	b, ok := sampleAt(samples, bt.Back)
	if !ok {
		return f, errors.New("no reading of the guest's console before the virtual break")
	}
	f.Baseline = b.consoleCounts
	if f.Running, ok = firstGrowth(samples, bt.Back, f.Baseline); !ok {
		return f, errors.New("the guest printed no progress line after the virtual break")
	}
	f.ToRunning = f.Running.At.Sub(bt.Back)
	return f, nil
}
