package proxy

import (
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Migration is one migration registered on the target side: the only
// streams the proxy will relay, and the only sockets it will relay them to.
type Migration struct {
	ID      string          `json:"id"`
	Domain  string          `json:"domain"`
	Targets map[Kind]string `json:"targets"` // stream -> local unix socket
	Expires time.Time       `json:"expires"`
}

// Counters are one migration's relayed bytes per stream and direction.
type Counters struct {
	// ToTarget and FromTarget are indexed by Kind.
	ToTarget   [4]atomic.Uint64
	FromTarget [4]atomic.Uint64
	Conns      [4]atomic.Uint64
}

// Snapshot copies the counters as stream -> direction -> bytes.
func (c *Counters) Snapshot() map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for _, k := range DataKinds {
		if c.Conns[k].Load() == 0 {
			continue
		}
		out[k.String()] = map[string]uint64{"toTarget": c.ToTarget[k].Load(), "fromTarget": c.FromTarget[k].Load(), "connections": c.Conns[k].Load()}
	}
	return out
}

type entry struct {
	m        Migration
	counters *Counters
	conns    map[net.Conn]Kind
	// started: a stream of it was relayed, so once the node is shutting
	// down it is a migration in flight to let finish, not a new one.
	started bool
	ended   string // why it is gone, for refusals after the end
	endedAt time.Time
}

// registry holds the target side's registered migrations, and for a while
// the ended ones, so a late connection is told "ended" rather than "unknown".
type registry struct {
	mu      sync.Mutex
	entries map[string]*entry
	keep    time.Duration
	// closing is why new migrations are refused once the node is shutting
	// down: registrations, and streams of migrations that had not started.
	closing string
}

func newRegistry() *registry {
	return &registry{entries: map[string]*entry{}, keep: 10 * time.Minute}
}

func (r *registry) add(m Migration) error {
	if err := ValidID(m.ID); err != nil {
		return err
	}
	if len(m.Targets) == 0 {
		return fmt.Errorf("migration %s names no streams", m.ID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing != "" {
		return shutdownRefusal(fmt.Sprintf("%s: migration %s is not registered", r.closing, m.ID))
	}
	if e, ok := r.entries[m.ID]; ok && e.ended == "" {
		return fmt.Errorf("migration %s is already registered", m.ID)
	}
	r.entries[m.ID] = &entry{m: m, counters: &Counters{}, conns: map[net.Conn]Kind{}}
	return nil
}

// lookup finds the socket to relay a stream to, or says why not.
func (r *registry) lookup(h Header, now time.Time) (string, *entry, string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(now)
	e, ok := r.entries[h.ID]
	switch {
	case !ok:
		return "", nil, "unknown_migration", fmt.Sprintf("migration %s is not registered on this node", h.ID)
	case e.ended != "":
		return "", nil, "expired_migration", fmt.Sprintf("migration %s has ended (%s)", h.ID, e.ended)
	case r.closing != "" && !e.started:
		return "", nil, reasonShuttingDown, fmt.Sprintf("%s: migration %s had not started and is not let in", r.closing, h.ID)
	}
	target, ok := e.m.Targets[h.Kind]
	if !ok {
		return "", nil, "stream_not_registered", fmt.Sprintf("migration %s has no %s stream registered", h.ID, h.Kind)
	}
	return target, e, "", ""
}

func (r *registry) track(e *entry, c net.Conn, k Kind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.ended != "" {
		return false
	}
	e.conns[c] = k
	e.started = true
	return true
}

func (r *registry) untrack(e *entry, c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(e.conns, c)
}

// end unregisters a migration and cuts its connections.
func (r *registry) end(id, why string) (*entry, bool) {
	r.mu.Lock()
	e, ok := r.entries[id]
	if !ok || e.ended != "" {
		r.mu.Unlock()
		return nil, false
	}
	e.ended, e.endedAt = why, time.Now()
	conns := make([]net.Conn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return e, true
}

func (r *registry) expireLocked(now time.Time) {
	for id, e := range r.entries {
		switch {
		case e.ended == "" && !e.m.Expires.IsZero() && now.After(e.m.Expires):
			e.ended, e.endedAt = "registration expired", now
			for c := range e.conns {
				go c.Close()
			}
		case e.ended != "" && now.Sub(e.endedAt) > r.keep:
			delete(r.entries, id)
		}
	}
}

// active lists the live registrations.
func (r *registry) active() []Migration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(time.Now())
	var out []Migration
	for _, e := range r.entries {
		if e.ended == "" {
			out = append(out, e.m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// close refuses new migrations from now on, for the reason given.
func (r *registry) close(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = why
}

// inFlight lists the live registrations with streams open.
func (r *registry) inFlight() []inFlight {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []inFlight
	for _, e := range r.entries {
		if e.ended != "" || len(e.conns) == 0 {
			continue
		}
		f := inFlight{id: e.m.ID, domain: e.m.Domain, side: "target", counters: e.counters}
		for _, k := range e.conns {
			f.streams[k]++
		}
		out = append(out, f)
	}
	return out
}
