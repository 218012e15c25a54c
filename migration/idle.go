package migration

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// A node of launchers holds a libvirt connection per guest, nearly all of
// them idle, so a socket with nothing in flight is not read, nor its
// sampler woken, every tick:
// every idleReadTicks the jobs of the domains it holds are read (libvirt's
// migration job begins at Begin, before QEMU's first pass, and while it
// copies storage or the target prepares, nothing else tells it), and
// every idleSweepTicks it is listed whole, the net under a lost event for
// a domain come or gone. Between, its events wake it: libvirt sends one as
// a migration's first pass begins on the source (migration-iteration) and
// as an incoming one starts on the target (started/migrated). While awake,
// or while anything of it is in flight, it is read whole every tick, as
// before. A migration that fails within idleReadTicks of its Begin,
// before its first pass, leaves no job.
const (
	idleReadTicks  = 6
	idleSweepTicks = 60
	// awakeTicks is how long an event keeps a socket read every tick.
	awakeTicks = 10
)

// pace is one socket's idle pacing, kept by its sampler: when it last
// read the socket's jobs and listed it, and when an event last woke it.
type pace struct {
	interval        time.Duration
	jobsAt, sweptAt time.Time
	// woken is when the socket's last event came (unix nanoseconds);
	// written by the event reader, read by the sampler.
	woken atomic.Int64
}

// newPace starts a socket's pacing at a random phase: sockets connected
// together (ferryd's start) are not all read at the same moment.
func newPace(interval time.Duration, now time.Time) *pace {
	return &pace{interval: interval,
		jobsAt:  now.Add(-time.Duration(rand.Int64N(idleReadTicks)) * interval),
		sweptAt: now.Add(-time.Duration(rand.Int64N(idleSweepTicks)) * interval)}
}

func (p *pace) wake(at time.Time) { p.woken.Store(at.UnixNano()) }

func (p *pace) awake(now time.Time) bool {
	return now.Sub(time.Unix(0, p.woken.Load())) < awakeTicks*p.interval
}

// next says, as the sampler wakes, whether to read the socket whole
// (listed, every domain's job read) or only the jobs of the domains it
// holds. (Half an interval early counts: a timer is never early, a clock
// read after it may be.)
func (p *pace) next(now time.Time, busy bool) (whole, jobs bool) {
	due := func(at time.Time, ticks time.Duration) bool { return now.Sub(at) >= ticks*p.interval-p.interval/2 }
	switch {
	case busy || p.awake(now) || due(p.sweptAt, idleSweepTicks):
		p.sweptAt, p.jobsAt = now, now
		return true, false
	case due(p.jobsAt, idleReadTicks):
		p.jobsAt = now
		return false, true
	}
	return false, false
}

// wait is how long the sampler sleeps until its next read: an idle
// socket's connection wakes nothing in ferryd between its reads.
func (p *pace) wait(now time.Time, busy bool) time.Duration {
	if busy || p.awake(now) {
		return p.interval
	}
	next := min(p.jobsAt.Add(idleReadTicks*p.interval).Sub(now), p.sweptAt.Add(idleSweepTicks*p.interval).Sub(now))
	return max(next, p.interval)
}

// held are the domains the socket's last listing and events left it with.
func (t *Tracker) held(socket string) []libvirt.Domain {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]libvirt.Domain, 0, len(t.domains[socket]))
	for _, d := range t.domains[socket] {
		out = append(out, d.Ref)
	}
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
