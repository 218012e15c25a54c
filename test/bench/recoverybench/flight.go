package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
	"github.com/ferry-vm/ferry/test/testbed"
)

// flight is one migration in flight: the bed's blocking Migrate call, and
// the source ferryd's job of it as read over its debug socket.
type flight struct {
	name   string
	ferryd *client.Client
	ids    chan string
	done   chan callEnd
	// id is the migration ID ferryd gave it, once heard: a job of the same
	// name but another ID is not this migration's.
	id      string
	ended   bool
	err     error
	endedAt time.Time
	// events are every job event seen on any read: the job keeps a
	// bounded list, the bench the whole story.
	events map[eventKey]api.Event
}

// callEnd is the Migrate call's return, timed as it returns: the
// migration's total time is compared with the baseline's, so it must not
// hold the bench's half-second polling.
type callEnd struct {
	err error
	at  time.Time
}

type eventKey struct {
	at           int64
	kind, detail string
}

func startFlight(ctx context.Context, b *testbed.Bed, name string, st settings) *flight {
	f := &flight{name: name, ferryd: client.New(b.Node("a").DebugSocket),
		ids: make(chan string, 1), done: make(chan callEnd, 1), events: map[eventKey]api.Event{}}
	spec := testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry",
		BandwidthMiBs: st.BandwidthMiBs, PostCopyAfter: time.Duration(st.PostCopyAfterSeconds * float64(time.Second)),
		PostCopyBandwidthMiBs: st.PostCopyBandwidthMiBs, Policy: st.Policy,
		Started: func(id string) { f.ids <- id }}
	go func() {
		err := b.Migrate(ctx, spec)
		f.done <- callEnd{err, time.Now()}
	}()
	return f
}

// over says, without waiting, whether the Migrate call has returned.
func (f *flight) over() bool {
	if f.ended {
		return true
	}
	select {
	case e := <-f.done:
		f.ended, f.err, f.endedAt = true, e.err, e.at
	default:
	}
	return f.ended
}

// wait blocks until the Migrate call returns, and returns its error.
func (f *flight) wait(ctx context.Context) error {
	if f.over() {
		return f.err
	}
	select {
	case e := <-f.done:
		f.ended, f.err, f.endedAt = true, e.err, e.at
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// job reads the source's job of this migration and keeps its events. An
// interrupt does not cut the read: a broken run's events are kept for its
// post-mortem, and the client bounds the read.
func (f *flight) job() (api.Job, error) {
	if f.id == "" {
		select {
		case f.id = <-f.ids:
		default:
		}
	}
	j, err := f.ferryd.Job(context.Background(), f.name)
	if err != nil {
		return j, fmt.Errorf("reading the source's job of %s: %w", f.name, err)
	}
	if f.id != "" && (j.Proxy == nil || j.Proxy.MigrationID != f.id) {
		return j, fmt.Errorf("the source's job of %s is not migration %s", f.name, f.id)
	}
	for _, e := range j.Events {
		f.events[eventKey{e.Time.UnixNano(), e.Kind, e.Detail}] = e
	}
	return j, nil
}

// waitJob polls the source's job until cond holds; the migration ending
// first is an error, what condition was awaited named in it.
func (f *flight) waitJob(ctx context.Context, within time.Duration, what string, cond func(api.Job) bool) (api.Job, error) {
	until := time.Now().Add(within)
	var last api.Job
	var lastErr error
	for {
		if f.over() {
			return last, fmt.Errorf("the migration ended before %s (%s)", what, errText(f.err))
		}
		j, err := f.job()
		if err == nil && cond(j) {
			return j, nil
		}
		if err == nil {
			last = j
		}
		lastErr = err
		if time.Now().After(until) {
			return last, fmt.Errorf("no %s within %v (the source job: phase %q, mode %q; last read: %s)", what, within, last.Phase, last.Mode, errText(lastErr))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return last, err
		}
	}
}

// finalJob is the source's job once it has ended: the Migrate call returns
// on the job's end, but a read right after it may still see it running.
func (f *flight) finalJob(ctx context.Context) (api.Job, error) {
	const within = 15 * time.Second
	until := time.Now().Add(within)
	for {
		j, err := f.job()
		if err == nil && j.Phase.Finished() {
			return j, nil
		}
		if time.Now().After(until) {
			return j, fmt.Errorf("the source job did not end within %v of the migrate call's return (phase %q; last read: %s)", within, j.Phase, errText(err))
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return j, err
		}
	}
}

// allEvents are the job's events seen on any read, in time order.
func (f *flight) allEvents() []api.Event {
	out := make([]api.Event, 0, len(f.events))
	for _, e := range f.events {
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].Time.Before(out[k].Time) })
	return out
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
