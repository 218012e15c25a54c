package main

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
)

func TestPairPauseFromSourceSuspendToTargetResume(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(ms int, node, dom string, e, d int32) lifecycle {
		return lifecycle{Node: node, Domain: dom, Event: e, Detail: d, Time: at(ms)}
	}
	const g = "pb-over"
	for _, c := range []struct {
		name string
		evs  []lifecycle
		ms   float64
		via  string
	}{
		{"pre-copy", []lifecycle{
			ev(50, "b", g, libvirtx.EventStarted, libvirtx.StartedMigrated),
			ev(9000, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedMigrated),
			ev(9046, "b", g, libvirtx.EventResumed, libvirtx.ResumedMigrated),
			ev(9050, "a", g, libvirtx.EventStopped, libvirtx.StoppedMigrated),
		}, 46, "suspended/migrated -> resumed/migrated"},
		{"post-copy, the stop seen as migrated first", []lifecycle{
			ev(18000, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedMigrated),
			ev(18010, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedPostCopy),
			ev(18120, "b", g, libvirtx.EventResumed, libvirtx.ResumedPostCopy),
			ev(24000, "b", g, libvirtx.EventResumed, libvirtx.ResumedMigrated),
		}, 120, "suspended/migrated -> resumed/post-copy"},
		{"post-copy, other guests and a user pause around it", []lifecycle{
			ev(100, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedPaused),
			ev(200, "a", g, libvirtx.EventResumed, libvirtx.ResumedUnpaused),
			ev(500, "a", "pb-other", libvirtx.EventSuspended, libvirtx.SuspendedPostCopy),
			ev(600, "b", g, libvirtx.EventResumed, libvirtx.ResumedPostCopy),
			ev(18000, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedPostCopy),
			ev(18005, "a", g, libvirtx.EventResumed, libvirtx.ResumedPostCopy),
			ev(18200, "b", g, libvirtx.EventResumed, libvirtx.ResumedPostCopy),
		}, 200, "suspended/post-copy -> resumed/post-copy"},
		{"post-copy, the target resuming 30 ms after the stop", []lifecycle{
			ev(18000, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedMigrated),
			ev(18002, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedPostCopy),
			ev(18030, "b", g, libvirtx.EventResumed, libvirtx.ResumedPostCopy),
			ev(24000, "b", g, libvirtx.EventResumed, libvirtx.ResumedMigrated),
		}, 30, "suspended/migrated -> resumed/post-copy"},
	} {
		p, ok := pairPause(c.evs, g, "a", "b", t0)
		if !ok || p.Ms != c.ms || p.Via != c.via {
			t.Errorf("%s: %+v %v, want %v ms via %s", c.name, p, ok, c.ms, c.via)
		}
	}
	// In post-copy the end of the transfer (resumed/migrated) never ends
	// the pause, even when the resumed/post-copy was missed.
	late := []lifecycle{ev(18000, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedPostCopy), ev(24000, "b", g, libvirtx.EventResumed, libvirtx.ResumedMigrated)}
	if p, ok := pairPause(late, g, "a", "b", t0); ok {
		t.Errorf("post-copy paused until the transfer ended: %+v", p)
	}
	// An abort in pre-copy: no suspend, the target's domain stops.
	abort := []lifecycle{ev(100, "b", g, libvirtx.EventStarted, libvirtx.StartedMigrated), ev(13000, "b", g, libvirtx.EventStopped, libvirtx.StoppedFailed)}
	if p, ok := pairPause(abort, g, "a", "b", t0); ok {
		t.Errorf("aborted migration paired: %+v", p)
	}
	// Events before the migration started belong to an earlier one.
	old := []lifecycle{ev(-5000, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedMigrated), ev(40, "b", g, libvirtx.EventResumed, libvirtx.ResumedMigrated)}
	if p, ok := pairPause(old, g, "a", "b", t0); ok {
		t.Errorf("paired across migrations: %+v", p)
	}
	// The reverse direction needs b's suspend and a's resume.
	if _, ok := pairPause([]lifecycle{ev(1, "a", g, libvirtx.EventSuspended, libvirtx.SuspendedMigrated), ev(2, "b", g, libvirtx.EventResumed, libvirtx.ResumedMigrated)}, g, "b", "a", t0); ok {
		t.Error("paired a suspend on the target with a resume on the source")
	}
}
