package migration

import (
	"sync/atomic"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
)

// A node of launchers holds a libvirt connection per guest, nearly all of
// them idle, so a socket with nothing in flight is not read every tick:
// it is listed every idleListTicks, and every domain's job is read every
// idleSweepTicks, the net under a lost event. Between, its events wake it:
// libvirt sends one as a migration's first pass begins on the source
// (migration-iteration) and as an incoming one starts on the target
// (started/migrated), and a domain the listing finds in another state is
// read at once. While awake, or while anything of it is in flight, it is
// read every tick, as before.
const (
	idleListTicks  = 6
	idleSweepTicks = 60
	// awakeTicks is how long an event keeps a socket read every tick.
	awakeTicks = 10
)

// pace is one socket's idle pacing, kept by its sampler.
type pace struct {
	ticks uint64
	// woken is when the socket's last event came (unix nanoseconds);
	// written by the event reader, read by the sampler.
	woken atomic.Int64
	// seen is each domain's state at the last listing, to read at once
	// those that moved.
	seen map[string][2]int32
}

func (p *pace) wake(at time.Time) { p.woken.Store(at.UnixNano()) }

// next says, at a tick, whether to scan and whether whole: every domain's
// job read, or only those whose state moved.
func (p *pace) next(now time.Time, interval time.Duration, busy bool) (scan, whole bool) {
	p.ticks++
	awake := now.Sub(time.Unix(0, p.woken.Load())) < awakeTicks*interval
	switch {
	case busy || awake || p.ticks%idleSweepTicks == 0:
		return true, true
	case p.ticks%idleListTicks == 0:
		return true, false
	}
	return false, false
}

// moved keeps the listing's states and says which domains are new or in
// another state than at the last listing.
func (p *pace) moved(list []libvirtx.Domain) map[string]bool {
	out := map[string]bool{}
	seen := make(map[string][2]int32, len(list))
	for _, d := range list {
		st := [2]int32{int32(d.State), d.Reason}
		if was, ok := p.seen[d.Name]; !ok || was != st {
			out[d.Name] = true
		}
		seen[d.Name] = st
	}
	p.seen = seen
	return out
}

// busy says whether anything of socket is in flight or owed a reading:
// a job, a failed post-copy the ledger watches, a job's final statistics,
// or a migration the driver drives from it.
func (t *Tracker) busy(socket string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.jobs {
		if k.socket == socket {
			return true
		}
	}
	for k := range t.finals {
		if k.socket == socket {
			return true
		}
	}
	if t.ledger.holds(socket) {
		return true
	}
	if t.cfg.Driver == nil {
		return false
	}
	for name := range t.domains[socket] {
		if d, ok := t.cfg.Driver.Driving(socket, name); ok && !d.Shown {
			return true
		}
	}
	return false
}
