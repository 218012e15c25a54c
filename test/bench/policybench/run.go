package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/test/testbed"
)

// result is one migration of one case under one policy.
type result struct {
	Case   string `json:"case"`
	Policy string `json:"policy"`
	// Run counts the repetitions from 1.
	Run      int    `json:"run"`
	From     string `json:"from"`
	To       string `json:"to"`
	Complete bool   `json:"completed"`
	// Outcome is how it ended: pre-copy, post-copy, or the job's phase
	// and failure class.
	Outcome      string  `json:"outcome"`
	TotalSeconds float64 `json:"totalSeconds"`
	// DowntimeMs is libvirt's completed-job downtime on the target
	// (DowntimeFrom "libvirt"); after post-copy libvirt keeps none.
	DowntimeMs   uint64 `json:"downtimeMs,omitempty"`
	DowntimeFrom string `json:"downtimeFrom,omitempty"`
	// PauseMs is the pause between the source's suspended and the
	// target's resumed lifecycle events (PauseVia names them), pre-copy
	// and post-copy alike.
	PauseMs  float64 `json:"pauseMs,omitempty"`
	PauseVia string  `json:"pauseVia,omitempty"`
	// Events are the guest's lifecycle events on both nodes, from the
	// migration's start.
	Events          []string `json:"events,omitempty"`
	PostCopySeconds float64  `json:"postCopySeconds,omitempty"`
	ThrottlePercent uint64   `json:"throttlePercent"`
	Passes          uint64   `json:"passes"`
	// Steps are what steered the migration: the bench's KubeVirt monitor
	// or Ferry's policy steps from the source job.
	Steps         []string `json:"steps,omitempty"`
	FailureReason string   `json:"failureReason,omitempty"`
	Error         string   `json:"error,omitempty"`
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "policybench: "+format+"\n", args...)
}

// runCase starts the case's guest and migrates it back and forth, once
// per policy; a guest a migration left broken is started again.
func runCase(ctx context.Context, b *testbed.Bed, lg *eventLog, o options, run int, c guestCase, order []policyKind) ([]result, error) {
	name := "pb-" + c.Name
	start := func() error {
		_ = b.DestroyGuest(name)
		return b.StartGuest(ctx, testbed.GuestSpec{Name: name, Node: "a", MemoryMiB: c.MemoryMiB, DirtyMiB: c.DirtyMiB, DirtyRateMiBs: c.RateMiBs})
	}
	if err := start(); err != nil {
		return nil, err
	}
	defer b.DestroyGuest(name)
	var out []result
	for _, k := range order {
		from, err := whereRuns(b, name)
		if err != nil {
			logf("%s: %v; starting it again", name, err)
			if err := start(); err != nil {
				return out, err
			}
			from = "a"
		}
		to := map[string]string{"a": "b", "b": "a"}[from]
		logf("run %d: %s (%s) under %s: %s -> %s", run, c.Name, c.Load, k.Name, from, to)
		r := runOne(ctx, b, lg, o, c, k, name, from, to)
		r.Run = run
		logf("run %d: %s under %s: %s in %.1fs, downtime %d ms (%s), pause %.1f ms (%s), post-copy %.1fs, steps %v %s",
			run, c.Name, k.Name, r.Outcome, r.TotalSeconds, r.DowntimeMs, r.DowntimeFrom, r.PauseMs, r.PauseVia, r.PostCopySeconds, r.Steps, r.Error)
		out = append(out, r)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		select {
		case <-time.After(o.settle):
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// runOne migrates the guest once and reads how it went from Ferry's job,
// libvirt's job statistics on the source while it runs, libvirt's
// completed-job statistics on the target after, and both libvirtds'
// lifecycle events.
func runOne(ctx context.Context, b *testbed.Bed, lg *eventLog, o options, c guestCase, k policyKind, name, from, to string) result {
	r := result{Case: c.Name, Policy: k.Name, From: from, To: to}
	src, err := b.Libvirt(from)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer src.Disconnect()
	dom, err := src.DomainLookupByName(name)
	if err != nil {
		r.Error = fmt.Sprintf("guest %s on %s: %v", name, from, err)
		return r
	}
	deadline := completionDeadline(c.MemoryMiB, o.perGiB)
	// A run that neither ends nor is ended by its policy is cut off, far
	// past any policy's own backstop.
	mctx, cancel := context.WithTimeout(ctx, max(deadline, 5*time.Minute)+3*time.Minute)
	defer cancel()
	ids := make(chan string, 1)
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		done <- b.Migrate(mctx, testbed.MigrateSpec{Name: name, From: from, To: to, Via: "ferry",
			BandwidthMiBs: o.bandwidth, PostCopyBandwidthMiBs: o.postCopyBandwidth, PostCopy: k.PostCopy,
			Policy: k.Mode, MaxDowntimeMs: o.maxDowntimeMs, Started: func(id string) { ids <- id }})
	}()
	var mon *monitor
	if k.Monitor {
		mon = newMonitor(deadline, k.PostCopy)
	}
	ferryd := client.New(b.Node(from).DebugSocket)
	// KubeVirt's monitor polls every 400 ms; the bench polls faster to
	// catch a post-copy phase that lasts a second or less.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var migErr error
	var switched, ended time.Time
poll:
	for {
		select {
		case migErr = <-done:
			ended = time.Now()
			break poll
		case <-tick.C:
		}
		rd, err := readSource(src, dom)
		if rd.postCopy {
			if switched.IsZero() {
				switched = time.Now()
			}
			continue
		}
		if err != nil {
			continue // the domain left the source at the end, or a slow call
		}
		r.ThrottlePercent = max(r.ThrottlePercent, rd.stats.AutoConvergeThrottle)
		if mon == nil || !rd.stats.Type.Active() || rd.stats.DataTotal == 0 {
			continue
		}
		elapsed := time.Since(t0)
		mv := mon.observe(elapsed, rd.stats.DataRemaining)
		if mv == keep {
			continue
		}
		res := steer(ctx, ferryd, name, mv)
		r.Steps = append(r.Steps, fmt.Sprintf("%s %.0fs", mv, elapsed.Seconds()))
		logf("%s under %s: %s after %.1fs, %d MiB left: %s", c.Name, k.Name, mv, elapsed.Seconds(), rd.stats.DataRemaining>>20, res)
	}
	r.TotalSeconds = ended.Sub(t0).Seconds()
	r.Complete = migErr == nil
	if migErr != nil {
		r.Error = migErr.Error()
	}
	var id string
	select {
	case id = <-ids:
	default:
	}
	if j, ok := finishedJob(ferryd, name, id); ok {
		r.Passes = j.Iteration
		r.FailureReason = j.FailureReason
		r.ThrottlePercent = max(r.ThrottlePercent, j.AutoConvergeThrottle)
		if j.Policy != nil {
			for _, s := range j.Policy.Steps {
				r.Steps = append(r.Steps, stepText(s))
			}
		}
		switch {
		case r.Complete && (j.Mode == api.ModePostCopy || !switched.IsZero()):
			r.Outcome = "post-copy"
		case r.Complete:
			r.Outcome = "pre-copy"
		case j.FailureClass != "":
			r.Outcome = string(j.Phase) + " " + string(j.FailureClass)
		default:
			r.Outcome = string(j.Phase)
		}
	} else if r.Complete {
		r.Outcome = "completed (no job)"
	} else {
		r.Outcome = "failed (no job)"
	}
	if r.Complete && r.Outcome == "post-copy" {
		// From libvirt's post-copy event as Ferry recorded it to the job's
		// end; the bench's own polls when the job lacks either.
		from, to := switched, ended
		if j, ok := finishedJob(ferryd, name, id); ok && j.EndTime != nil {
			for _, e := range j.Events {
				if e.Kind == "mode" && strings.Contains(strings.ToLower(e.Detail), "post") {
					from, to = e.Time, *j.EndTime
					break
				}
			}
		}
		if !from.IsZero() {
			r.PostCopySeconds = to.Sub(from).Seconds()
		}
	}
	if r.Complete {
		if dt, ok := targetDowntime(b, to, name); ok {
			r.DowntimeMs, r.DowntimeFrom = dt, "libvirt"
		}
		r.PauseMs, r.PauseVia, r.Events = eventPause(lg, name, from, to, t0)
	}
	return r
}

// eventPause pairs the migration's lifecycle events; the target's resumed
// event may reach the bench a moment after the migrate call returned.
func eventPause(lg *eventLog, name, from, to string, t0 time.Time) (float64, string, []string) {
	until := time.Now().Add(3 * time.Second)
	for {
		evs, err := lg.since(name, t0)
		var seen []string
		for _, e := range evs {
			seen = append(seen, fmt.Sprintf("+%.3fs %s", e.Time.Sub(t0).Seconds(), e))
		}
		if p, ok := pairPause(evs, name, from, to, t0); ok {
			return p.Ms, p.Via, seen
		}
		if err != nil || time.Now().After(until) {
			logf("%s: no pause in the lifecycle events %v %v", name, seen, err)
			return 0, "", seen
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func stepText(s api.PolicyStep) string {
	t := fmt.Sprintf("%s@%d", s.Action, s.Iteration)
	if s.MaxDowntimeMs > 0 {
		t += fmt.Sprintf(" %dms", s.MaxDowntimeMs)
	}
	if !s.Applied {
		t += " (advised)"
	}
	if s.Error != "" {
		t += " (error: " + s.Error + ")"
	}
	return t
}

// sourceReading is one poll of the source's running job.
type sourceReading struct {
	stats    libvirtx.JobStats
	postCopy bool
}

// callTimeout bounds one libvirt call: go-libvirt has no deadline of its
// own, and a busy QEMU monitor must not stop the monitor's clock.
const callTimeout = 5 * time.Second

func within[T any](what string, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() { v, err := f(); ch <- res{v, err} }()
	select {
	case x := <-ch:
		return x.v, x.err
	case <-time.After(callTimeout):
		var zero T
		return zero, fmt.Errorf("libvirt: %s did not answer within %v", what, callTimeout)
	}
}

func readSource(l *libvirt.Libvirt, dom libvirt.Domain) (sourceReading, error) {
	var rd sourceReading
	st, err := within("state", func() ([2]int32, error) {
		s, reason, err := l.DomainGetState(dom, 0)
		return [2]int32{s, reason}, err
	})
	if err != nil {
		return rd, err
	}
	rd.postCopy = libvirtx.State(st[0]) == libvirtx.StatePaused && st[1] == libvirtx.PausedPostCopy
	rd.stats, err = within("job stats", func() (libvirtx.JobStats, error) {
		typ, params, err := l.DomainGetJobStats(dom, 0)
		return libvirtx.DecodeJobStats(typ, params), err
	})
	return rd, err
}

// targetDowntime is the downtime in libvirt's completed-job statistics on
// the target, read without deleting them (KEEP_COMPLETED). libvirt keeps
// them after a pre-copy migration only.
func targetDowntime(b *testbed.Bed, node, name string) (uint64, bool) {
	l, err := b.Libvirt(node)
	if err != nil {
		return 0, false
	}
	defer l.Disconnect()
	dom, err := within("lookup", func() (libvirt.Domain, error) { return l.DomainLookupByName(name) })
	if err != nil {
		return 0, false
	}
	s, err := within("completed job stats", func() (libvirtx.JobStats, error) {
		typ, params, err := l.DomainGetJobStats(dom, libvirt.DomainJobStatsCompleted|libvirt.DomainJobStatsKeepCompleted)
		return libvirtx.DecodeJobStats(typ, params), err
	})
	if err != nil || s.Type != libvirtx.JobCompleted || s.Operation != libvirtx.OperationMigrationIn {
		return 0, false
	}
	return s.DowntimeMs, true
}

// whereRuns is the node whose libvirt runs the guest; anything but
// exactly one running copy is an error.
func whereRuns(b *testbed.Bed, name string) (string, error) {
	var running []string
	for _, n := range []string{"a", "b"} {
		l, err := b.Libvirt(n)
		if err != nil {
			return "", err
		}
		dom, err := within("lookup", func() (libvirt.Domain, error) { return l.DomainLookupByName(name) })
		if err == nil {
			st, err := within("state", func() (int32, error) { s, _, err := l.DomainGetState(dom, 0); return s, err })
			if err == nil && libvirtx.State(st) == libvirtx.StateRunning {
				running = append(running, n)
			}
		}
		l.Disconnect()
	}
	if len(running) != 1 {
		return "", fmt.Errorf("guest %s runs on %d nodes %v, want one", name, len(running), running)
	}
	return running[0], nil
}

// steer asks the source ferryd what ferryctl postcopy / abort ask, and
// says for the log what ferryd answered: a refusal with its status, which
// tells "not now" (409, e.g. an abort once in post-copy) from "no job"
// (404).
func steer(ctx context.Context, ferryd *client.Client, name string, mv move) string {
	var res api.AbortResult
	var err error
	if mv == switchPostCopy {
		res, err = ferryd.PostCopy(ctx, name)
	} else {
		res, err = ferryd.Abort(ctx, name, false)
	}
	var refused *client.Error
	switch {
	case errors.As(err, &refused):
		return fmt.Sprintf("%d %s", refused.Status, refused.Message)
	case err != nil:
		return err.Error()
	}
	return res.Message
}

// finishedJob is the source job of the migration with that ID once it has
// ended; the migrate call returns on the job's end, the truth readings
// around it may lag. It is read even once the bench is interrupted: the
// run's result is still written.
func finishedJob(ferryd *client.Client, name, id string) (api.Job, bool) {
	until := time.Now().Add(15 * time.Second)
	for time.Now().Before(until) {
		j, err := ferryd.Job(context.Background(), name)
		if err == nil && j.Phase.Finished() && j.Proxy != nil && (id == "" || j.Proxy.MigrationID == id) {
			return j, true
		}
		time.Sleep(250 * time.Millisecond)
	}
	return api.Job{}, false
}
