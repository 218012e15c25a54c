package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// runResult is one run: a guest migrated a -> b, its post-copy broken and
// resumed, or, for the baseline, left whole.
type runResult struct {
	Scenario string `json:"scenario"`
	// Route is how the source was told to resume (--postcopy-resume);
	// ResumedBy what the target's libvirt shows its QEMU was started for:
	// "monitor" where it has Ferry's, "libvirt" where not.
	Route     string `json:"route,omitempty"`
	ResumedBy string `json:"resumedBy,omitempty"`
	Run       int    `json:"run"`
	Guest     string `json:"guest"`
	// OK says the migration completed and the guest's memory checked
	// whole after the resume (the virtual break): only such runs are
	// timed in the report.
	// The figures of a failed run stay here for a post-mortem.
	OK          bool   `json:"ok"`
	Failure     string `json:"failure,omitempty"`
	MigrationID string `json:"migrationId,omitempty"`
	TLS         *bool  `json:"tls,omitempty"`

	// For the baseline, BrokeAt and PathBackAt are both the virtual
	// break; it has no pause or resume.
	BrokeAt    time.Time `json:"brokeAt,omitzero"`
	PathBackAt time.Time `json:"pathBackAt,omitzero"`
	PausedAt   time.Time `json:"pausedAt,omitzero"`
	ResumedAt  time.Time `json:"resumedAt,omitzero"`
	RunningAt  time.Time `json:"runningAt,omitzero"`
	// The three figures: from the path's return to the job's first
	// resumed attempt and to the guest's first new console line, and
	// from the break to that line. The baseline has only the second.
	ResumedSeconds float64 `json:"resumedSeconds,omitempty"`
	RunningSeconds float64 `json:"runningSeconds,omitempty"`
	PauseSeconds   float64 `json:"pauseSeconds,omitempty"`
	// DetectSeconds is, for a cut, from the cut to the job's pause.
	DetectSeconds float64 `json:"detectSeconds,omitempty"`
	// ResumeAttempt is the attempt that resumed, Attempts all the job
	// counted, ResumeTookMs Ferry's own figure for the resume.
	ResumeAttempt    int     `json:"resumeAttempt,omitempty"`
	Attempts         int     `json:"attempts,omitempty"`
	ResumeTookMs     float64 `json:"resumeTookMs,omitempty"`
	ChecksAfter      int     `json:"checksAfterPause,omitempty"`
	MigrationSeconds float64 `json:"migrationSeconds,omitempty"`
	// Events are the source job's events, seconds from the migration's
	// start.
	Events []string `json:"events,omitempty"`
}

func (r runResult) summary() string {
	if !r.OK {
		return "failed: " + r.Failure
	}
	if r.Scenario == unbroken {
		return fmt.Sprintf("running %.2fs after the virtual break; migration completed in %.1fs, %d memory checks ok since the virtual break",
			r.RunningSeconds, r.MigrationSeconds, r.ChecksAfter)
	}
	return fmt.Sprintf("resumed %.2fs and running %.2fs after the path came back, paused %.2fs in all; attempt %d resumed; migration completed in %.1fs, %d memory checks ok since the pause",
		r.ResumedSeconds, r.RunningSeconds, r.PauseSeconds, r.ResumeAttempt, r.MigrationSeconds, r.ChecksAfter)
}

// migrationTimeout bounds a run's migration, far past ferryd's default
// 5 minute recovery timeout and a capped post-copy's minute.
const migrationTimeout = 10 * time.Minute

// endCheckWait bounds the wait for a memory check once the migration has
// ended; the guest checks once a second.
const endCheckWait = 10 * time.Second

// runOne starts a guest on a, migrates it to b, breaks the post-copy and
// measures its recovery; for the baseline it breaks nothing and measures
// the same from the same moment. Its error is one the bench cannot go on after:
// the link left down, or the bench interrupted.
func runOne(ctx context.Context, b *testbed.Bed, o options, st settings, p planned, run int, name string) (runResult, error) {
	sc := p.label
	r := runResult{Scenario: sc, Run: run, Guest: name, Route: p.route}
	fail := func(format string, args ...any) runResult {
		r.Failure = fmt.Sprintf(format, args...)
		return r
	}
	err := b.StartGuest(ctx, testbed.GuestSpec{Name: name, Node: "a", MemoryMiB: st.MemoryMiB,
		DirtyMiB: st.DirtyMiB, DirtyRateMiBs: st.DirtyRateMiBs, Verify: true})
	if err != nil {
		_ = b.DestroyGuest(name) // created, perhaps, but never READY
		return fail("starting the guest: %v", err), ctx.Err()
	}
	mctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	t0 := time.Now()
	f := startFlight(mctx, b, name, st)
	defer func() {
		cancel()
		// The bed's Migrate returns soon after its context ends; the
		// guest goes only then, so the call never sees it vanish.
		wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
		f.wait(wctx)
		wcancel()
		if err := b.DestroyGuest(name); err != nil {
			logf("destroying guest %s: %v", name, err)
		}
	}()

	j, err := f.waitJob(ctx, 2*time.Minute, "switch to post-copy", func(j api.Job) bool { return j.Mode == api.ModePostCopy })
	if err != nil {
		return fail("waiting for post-copy: %v", err), ctx.Err()
	}
	logf("%s in post-copy %.1fs into the migration", name, time.Since(t0).Seconds())
	if j.Proxy != nil {
		r.MigrationID, r.TLS = j.Proxy.MigrationID, &j.Proxy.TLS
	}
	w := watchConsole(b, name)
	defer w.finish()
	// The stream has to be going, and the console read once, before the
	// break: the first new line is counted against that reading.
	if err := sleepCtx(ctx, time.Duration(st.BreakAfterSeconds*float64(time.Second))); err != nil {
		return fail("interrupted"), err
	}
	if !waitConsole(ctx, w, 5*time.Second, func(consoleCounts) bool { return true }) {
		_, cerr := w.finish()
		return fail("the guest's console could not be read: %s", errText(cerr)), ctx.Err()
	}

	var bt breakTimes
	measureRun := measure
	switch p.kind {
	case unbroken:
		bt, measureRun = noBreak(), measureUnbroken
	case "reset":
		bt, err = breakByReset(b)
	case "cut":
		bt, err = breakByCut(ctx, b, f, o.cutHold)
	default:
		return fail("unknown scenario %q", p.kind), nil
	}
	r.BrokeAt, r.PathBackAt = bt.Start, bt.Back
	if err != nil {
		var le *linkError
		if errors.As(err, &le) {
			return fail("%s: %v", sc, err), err
		}
		return fail("%s: %v", sc, err), ctx.Err()
	}

	migErr := follow(ctx, f)
	// Read once the migration is over: the monitor's arguments stay in the
	// live XML until the guest restarts, and libvirt 11.0 to 11.4 hold the
	// XML of a guest still migrating in behind its job.
	r.ResumedBy = resumedBy(b, name)
	if f.ended {
		r.MigrationSeconds = f.endedAt.Sub(t0).Seconds()
	}
	atEnd, _ := w.latest()
	final, jerr := f.finalJob(ctx)
	r.Events = eventLines(f.allEvents(), t0)
	if final.Recovery != nil {
		r.Attempts = final.Recovery.Attempts
	}
	// Figures are read whatever the outcome: a failed run's are kept for
	// a post-mortem, not reported.
	checked := migErr == nil && waitConsole(ctx, w, endCheckWait, func(c consoleCounts) bool { return c.OK > atEnd.OK || c.Bad != "" })
	samples, cerr := w.finish()
	fig, merr := measureRun(bt, f.allEvents(), samples)
	r.fill(fig, bt)
	switch {
	case migErr != nil:
		return fail("the migration did not complete: %v", migErr), ctx.Err()
	case jerr != nil:
		return fail("%v", jerr), ctx.Err()
	case final.Phase != api.PhaseCompleted:
		return fail("the source job ended %s: %s", final.Phase, final.FailureReason), nil
	case merr != nil && len(samples) == 0:
		return fail("%v (console: %s)", merr, errText(cerr)), nil
	case merr != nil:
		return fail("%v", merr), nil
	}
	_, bad, err := b.GuestVerified(name)
	last := samples[len(samples)-1]
	r.ChecksAfter = last.OK - fig.Baseline.OK
	switch {
	case err != nil:
		return fail("reading the guest's memory checks: %v", err), nil
	case bad != "":
		return fail("the guest's memory check failed: %s", bad), nil
	case r.ChecksAfter <= 0:
		return fail("no memory check passed after the %s", sinceWhat(sc)), nil
	case !checked:
		return fail("no memory check on the console within %v of the migration's end", endCheckWait), nil
	}
	r.OK = true
	return r, nil
}

// fill records what measure found, whole or in part.
func (r *runResult) fill(f figures, bt breakTimes) {
	r.PausedAt, r.ResumedAt, r.RunningAt = f.Paused, f.Resume.At, f.Running.At
	r.ResumeAttempt, r.ResumeTookMs = f.Resume.Attempt, float64(f.Resume.Took)/float64(time.Millisecond)
	if bt.PauseIsBreak && !f.Paused.IsZero() {
		r.DetectSeconds = f.Paused.Sub(bt.Start).Seconds()
	}
	if !f.Resume.At.IsZero() {
		r.ResumedSeconds = f.Resume.At.Sub(bt.Back).Seconds()
	}
	if !f.Running.At.IsZero() {
		r.RunningSeconds, r.PauseSeconds = f.ToRunning.Seconds(), f.PauseTotal.Seconds()
	}
}

// sinceWhat names the moment a run's memory checks are counted from.
func sinceWhat(sc string) string {
	if sc == unbroken {
		return "virtual break"
	}
	return "pause"
}

// waitConsole waits for a console reading that satisfies cond.
func waitConsole(ctx context.Context, w *consoleWatch, within time.Duration, cond func(consoleCounts) bool) bool {
	until := time.Now().Add(within)
	for {
		if s, ok := w.latest(); ok && cond(s.consoleCounts) {
			return true
		}
		if time.Now().After(until) || sleepCtx(ctx, consolePoll) != nil {
			return false
		}
	}
}

func eventLines(evs []api.Event, t0 time.Time) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("+%.3fs %s: %s", e.Time.Sub(t0).Seconds(), e.Kind, e.Detail))
	}
	return out
}

// follow reads the job until the migration ends, saying on stderr how it
// goes: a run's minute is not silent, and each event is seen while the
// job still holds it.
func follow(ctx context.Context, f *flight) error {
	var phase api.Phase
	resumed := 0
	for !f.over() {
		if j, err := f.job(); err == nil {
			if j.Phase != phase {
				phase = j.Phase
				logf("%s: the source job is %s", f.name, phase)
			}
			if j.Recovery != nil && j.Recovery.Resumed > resumed {
				resumed = j.Recovery.Resumed
				logf("%s: recovery attempt %d resumed the migration", f.name, j.Recovery.Attempts)
			}
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	return f.err
}

// resumedBy reads, from the target's libvirt, by which route the guest's
// post-copy was resumable: Ferry's monitor is in the target QEMU's live
// XML from its Prepare on, or not at all.
func resumedBy(b *testbed.Bed, name string) string {
	l, err := b.Libvirt("b")
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer l.Disconnect()
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		return "unknown: " + err.Error()
	}
	live, err := l.DomainGetXMLDesc(dom, 0)
	switch {
	case err != nil:
		return "unknown: " + err.Error()
	case strings.Contains(live, "ferry-recovery"):
		return "monitor"
	}
	return "libvirt"
}
