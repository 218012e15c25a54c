package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/test/testbed"
)

// lifecycle is one lifecycle event of one node's libvirtd, stamped when the
// bench received it; both nodes run on this machine, so one clock serves
// both.
type lifecycle struct {
	Node   string    `json:"node"`
	Domain string    `json:"domain"`
	Event  int32     `json:"event"`
	Detail int32     `json:"detail"`
	Time   time.Time `json:"time"`
}

func (e lifecycle) String() string {
	return e.Node + " " + libvirtx.EventName(e.Event, e.Detail)
}

// pause is the guest's real pause in a migration as libvirt's own events
// tell it: from the source's suspended event of the switch-over to the
// target's resumed event.
type pause struct {
	Ms float64
	// Via names the two events, e.g. "suspended/migrated -> resumed/post-copy".
	Via string
}

// pairPause finds the pause of the migration of guest from src to dst that
// started at since. The pause starts at the source's first suspended event
// of a migration: libvirt emits suspended/migrated when QEMU stops the vCPUs
// for the switch, and suspended/post-copy either then (if it already knew
// the job was in post-copy) or a moment later when QEMU reports
// postcopy-active, for the same pause. It ends at the target's first
// resumed event after that: resumed/migrated once libvirt starts the vCPUs
// after a pre-copy, resumed/post-copy once QEMU runs them in post-copy.
//
// A migration whose source went into post-copy ends its pause only at the
// target's resumed/post-copy: its resumed/migrated comes when post-copy is
// done, and the vCPUs ran all along.
func pairPause(evs []lifecycle, guest, src, dst string, since time.Time) (pause, bool) {
	postCopy := slices.ContainsFunc(evs, func(e lifecycle) bool {
		return e.Domain == guest && !e.Time.Before(since) && e.Node == src &&
			e.Event == libvirtx.EventSuspended && e.Detail == libvirtx.SuspendedPostCopy
	})
	var stop *lifecycle
	for i := range evs {
		e := &evs[i]
		if e.Domain != guest || e.Time.Before(since) {
			continue
		}
		if stop == nil {
			if e.Node == src && e.Event == libvirtx.EventSuspended &&
				(e.Detail == libvirtx.SuspendedMigrated || e.Detail == libvirtx.SuspendedPostCopy) {
				stop = e
			}
			continue
		}
		if e.Node == dst && e.Event == libvirtx.EventResumed && !e.Time.Before(stop.Time) &&
			(e.Detail == libvirtx.ResumedPostCopy || e.Detail == libvirtx.ResumedMigrated && !postCopy) {
			return pause{
				Ms:  float64(e.Time.Sub(stop.Time).Microseconds()) / 1000,
				Via: libvirtx.EventName(stop.Event, stop.Detail) + " -> " + libvirtx.EventName(e.Event, e.Detail),
			}, true
		}
	}
	return pause{}, false
}

// eventLog records every lifecycle event of both nodes' libvirtds for the
// whole run, each node on a connection of its own.
type eventLog struct {
	mu  sync.Mutex
	evs []lifecycle
	err map[string]error
}

func listenEvents(ctx context.Context, b *testbed.Bed, nodes ...string) (*eventLog, error) {
	lg := &eventLog{err: map[string]error{}}
	for _, n := range nodes {
		l, err := b.Libvirt(n)
		if err != nil {
			return nil, err
		}
		ch, err := l.LifecycleEvents(ctx)
		if err != nil {
			l.Disconnect()
			return nil, fmt.Errorf("lifecycle events of node %s: %w", n, err)
		}
		go func() {
			defer l.Disconnect()
			// go-libvirt stalls its connection's reader while this loop
			// is busy, so it only stamps and stores.
			for m := range ch {
				now := time.Now()
				lg.mu.Lock()
				lg.evs = append(lg.evs, lifecycle{Node: n, Domain: m.Dom.Name, Event: m.Event, Detail: m.Detail, Time: now})
				lg.mu.Unlock()
			}
			if ctx.Err() == nil {
				lg.mu.Lock()
				lg.err[n] = fmt.Errorf("lifecycle events of node %s stopped: connection lost", n)
				lg.mu.Unlock()
			}
		}()
	}
	return lg, nil
}

// since returns the guest's events from t on, and an error if a node's
// subscription has ended (its events would be missing).
func (lg *eventLog) since(guest string, t time.Time) ([]lifecycle, error) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	var out []lifecycle
	for _, e := range lg.evs {
		if e.Domain == guest && !e.Time.Before(t) {
			out = append(out, e)
		}
	}
	// Each node's listener appends as its events arrive; pairing needs
	// them in time order across both.
	slices.SortStableFunc(out, func(a, b lifecycle) int { return a.Time.Compare(b.Time) })
	for _, err := range lg.err {
		return out, err
	}
	return out, nil
}
