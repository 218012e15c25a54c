package proxy

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// Migration is one incoming migration on the target side: the only
// streams the proxy will relay, the only sockets it will relay them to, and
// how many connections each stream may open.
type Migration struct {
	ID      string               `json:"id"`
	Domain  string               `json:"domain"`
	Targets map[peer.Kind]string `json:"targets"` // stream -> local unix socket
	Limits  map[peer.Kind]int    `json:"limits"`  // stream -> connections allowed
	Expires time.Time            `json:"expires"`
	State   string               `json:"state"`
	// PeerNode is the node that prepared it, as its certificate names it.
	PeerNode string `json:"peerNode,omitempty"`
	// RecoveryOf, for the streams of a post-copy's recovery, is the
	// migration they resume, which may still be finishing.
	RecoveryOf string `json:"recoveryOf,omitempty"`
}

// States of an incoming migration. Data streams are relayed only once
// libvirt's Prepare has made the target QEMU listen, and until its Finish
// has returned.
const (
	statePreparing = "preparing"
	statePrepared  = "prepared"
	stateFinishing = "finishing"
)

// Counters are one migration's relayed bytes per stream and direction.
type Counters struct {
	// ToTarget and FromTarget are indexed by Kind.
	ToTarget   [4]atomic.Uint64
	FromTarget [4]atomic.Uint64
	Conns      [4]atomic.Uint64
	wire       wireRate // memory to the target
}

// Snapshot copies the counters as stream -> direction -> bytes.
func (c *Counters) Snapshot() map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for _, k := range peer.DataKinds {
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
	conns    map[net.Conn]peer.Kind
	// accepted counts the connections let in per stream, open or not: QEMU
	// opens each of its connections once, so one more than prepared for is
	// not QEMU's.
	accepted [4]int
	// started: a stream of it was relayed, so once the node is shutting
	// down it is a migration in flight to let finish, not a new one.
	started bool
	// in is what libvirt was prepared with, to finish or cancel it; nil
	// for a migration whose libvirt side the caller of Register runs.
	in *peer.IncomingMigration
	// owner is the TLS identity that prepared it: only that peer may
	// finish or cancel it. Empty without TLS.
	owner string
	// instance names the guest its Prepare started (see Incoming.Instance).
	instance string
	// result is what its finish answered, given again to a finish
	// repeated because the first answer was lost; resultReady is closed
	// once it is set, for a repeat that came while the first still ran.
	result      *peer.ControlResponse
	resultReady chan struct{}
	// cutWaiter ends the repeat waiting on resultReady, if one does: a
	// newer repeat replaces it, so one peer holds one wait per migration.
	cutWaiter func()
	// stopFinish cuts a libvirt Finish in progress and its control
	// connection, so ending the migration never waits on a source that
	// stopped reading.
	stopFinish func()
	timers     []*time.Timer
	// look is a timer run again and again (see rearm), one of timers.
	look    *time.Timer
	ended   string // why it is gone, for refusals after the end
	endedAt time.Time
}

// registry holds the target side's migrations, and for a while the ended
// ones, so a late connection is told "ended" rather than "unknown".
type registry struct {
	mu      sync.Mutex
	entries map[string]*entry
	keep    time.Duration
	// closing is why new migrations are refused once the node is shutting
	// down: prepares, and streams of migrations that had not started.
	closing string
	// inbound bounds the migrations (not dry runs) prepared and not ended;
	// turnedAway is when each peer last found them all taken.
	inbound    int
	turnedAway map[string]time.Time
}

// contention is how long a peer turned away for want of an inbound slot
// holds the others to their share (see add).
const contention = 30 * time.Second

// maxDryRuns bounds the dry runs under way here: each starts a target QEMU.
const maxDryRuns = 2

func newRegistry(inbound int) *registry {
	return &registry{entries: map[string]*entry{}, keep: 10 * time.Minute, inbound: inbound, turnedAway: map[string]time.Time{}}
}

// regError is a registry refusal with its ferry_proxy_rejected_total reason.
type regError struct{ reason, msg string }

func (e *regError) Error() string { return e.msg }

// inboundSlot says whether owner may take one more of the node's inbound
// slots. A peer alone may take them all (one node draining into this one
// uses both); once another has been turned away, each is held to its
// share, so no peer can keep the others out. Peers are told apart by
// certificate only: without TLS every peer is one.
func (r *registry) inboundSlot(owner string, moving, mineMoving int) error {
	now := time.Now()
	contended := false
	for o, at := range r.turnedAway {
		switch {
		case now.Sub(at) > contention:
			delete(r.turnedAway, o)
		case o != owner:
			contended = true
		}
	}
	share := max(1, r.inbound/2)
	switch {
	case moving >= r.inbound:
		r.turnedAway[owner] = now
		return &regError{peer.ReasonInboundBusy, fmt.Sprintf("%d migrations are coming into this node, the most it takes at once: wait your turn", moving)}
	case contended && mineMoving >= share:
		return &regError{peer.ReasonInboundBusy, fmt.Sprintf("this peer has %d of this node's %d inbound slots while another waits: wait your turn", mineMoving, r.inbound)}
	}
	return nil
}

func (r *registry) add(m Migration, in *peer.IncomingMigration, owner string) error {
	if err := peer.ValidID(m.ID); err != nil {
		return &regError{reasonInvalidID, err.Error()}
	}
	if len(m.Targets) == 0 {
		return &regError{reasonMalformedRequest, fmt.Sprintf("migration %s names no streams", m.ID)}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gcLocked(time.Now())
	if r.closing != "" {
		return shutdownRefusal(fmt.Sprintf("%s: migration %s is not prepared", r.closing, m.ID))
	}
	if _, ok := r.entries[m.ID]; ok {
		// An ended id is not reused either: its late streams must keep
		// hearing "ended".
		return &regError{reasonDuplicate, fmt.Sprintf("migration %s is already known on this node", m.ID)}
	}
	live, mine, moving, mineMoving, trials := 0, 0, 0, 0, 0
	counted := in != nil || m.RecoveryOf != ""
	for _, e := range r.entries {
		if e.ended == "" && (e.in != nil || e.m.RecoveryOf != "") {
			live++
			if e.owner == owner {
				mine++
			}
			switch {
			case e.in != nil && e.in.DryRun:
				trials++
			case e.in != nil:
				moving++
				if e.owner == owner {
					mineMoving++
				}
			}
		}
	}
	if in != nil && in.DryRun && trials >= maxDryRuns {
		return &regError{peer.ReasonInboundBusy, fmt.Sprintf("%d dry runs are under way on this node, the most it takes at once: ask again", trials)}
	}
	if in != nil && !in.DryRun && r.inbound > 0 {
		if err := r.inboundSlot(owner, moving, mineMoving); err != nil {
			return err
		}
	}
	// A recovery's streams count against its peer's share only: other
	// peers' prepares must not starve a split guest's resumption.
	if in != nil && live >= MaxIncoming {
		return &regError{reasonTooManyIncoming, fmt.Sprintf("%d incoming migrations are prepared and not ended, the most this node takes at once", live)}
	}
	if counted && owner != "" && !strings.HasPrefix(owner, "plain:") && mine >= MaxIncomingPerPeer {
		// One peer, however its migrations stall, leaves the rest of the
		// node's incoming migrations to the others.
		return &regError{reasonTooManyIncoming, fmt.Sprintf("this peer has %d incoming migrations prepared and not ended here, the most one peer may", mine)}
	}
	for _, e := range r.entries {
		if e.ended == "" && e.m.Domain == m.Domain && e.m.ID != m.RecoveryOf {
			// The other migration's id is its capability: never named.
			return &regError{reasonDuplicate, fmt.Sprintf("domain %s already has an incoming migration on this node", m.Domain)}
		}
	}
	r.entries[m.ID] = &entry{m: m, counters: &Counters{}, conns: map[net.Conn]peer.Kind{}, in: in, owner: owner, resultReady: make(chan struct{})}
	return nil
}

// setState moves a live migration of domain (any if empty) from one state
// to the next; it fails if the migration is gone, of another domain or not
// in the state expected.
func (r *registry) setState(id, domain, from, to string) (*entry, error) {
	return r.claim(id, domain, "", false, from, to)
}

// claim is setState for a peer: when checkOwner is set, a migration
// prepared by another TLS identity is as unknown as one never prepared.
func (r *registry) claim(id, domain, owner string, checkOwner bool, from, to string) (*entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	switch {
	case !ok || (checkOwner && !ownerMatches(e.owner, owner)):
		return nil, &regError{peer.ReasonUnknownMigration, fmt.Sprintf("migration %s is not known on this node", id)}
	case e.ended != "":
		return nil, &regError{"expired_migration", fmt.Sprintf("migration %s has ended (%s)", id, e.ended)}
	case domain != "" && e.m.Domain != domain:
		return nil, &regError{reasonInvalidDomain, fmt.Sprintf("migration %s is not of domain %s", id, domain)}
	case e.m.State != from:
		return nil, &regError{reasonWrongState, fmt.Sprintf("migration %s is %s, not %s", id, e.m.State, from)}
	}
	e.m.State = to
	return e, nil
}

// finishedResult is the stored answer of a migration's finish, for the
// peer that prepared it.
func (r *registry) finishedResult(id, domain, owner string) (peer.ControlResponse, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	if !ok || !ownerMatches(e.owner, owner) || e.m.Domain != domain || e.result == nil {
		return peer.ControlResponse{}, false
	}
	return *e.result, true
}

// notStarted: live migration id of domain, prepared by owner, has relayed
// no stream yet. Any other is left to claim's refusals.
func (r *registry) notStarted(id, domain, owner string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	return ok && e.ended == "" && ownerMatches(e.owner, owner) && e.m.Domain == domain && !e.started
}

// setStopFinish records how to cut a running finish; false if the
// migration ended meanwhile.
func (r *registry) setStopFinish(e *entry, stop func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.ended != "" {
		return false
	}
	e.stopFinish = stop
	return true
}

func (r *registry) setResult(e *entry, resp peer.ControlResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.result == nil {
		e.result = &resp
		close(e.resultReady)
	}
}

// recovered replaces a split finish's kept answer once a recovery has the
// guest running whole here.
func (r *registry) recovered(id string, resp peer.ControlResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[id]; ok && e.result != nil && e.result.Outcome == peer.OutcomeSplit && resp.Outcome == peer.OutcomeRunning {
		e.result = &resp
	}
}

// finishing returns the migration id of domain, prepared by owner, whose
// finish is running, so a repeat can wait for its answer; cut is called
// to end that wait early (a newer repeat, the migration's end).
func (r *registry) finishing(id, domain, owner string, cut func()) (*entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	if !ok || e.ended != "" || !ownerMatches(e.owner, owner) || e.m.Domain != domain || e.m.State != stateFinishing || e.result != nil {
		return nil, false
	}
	if e.cutWaiter != nil {
		e.cutWaiter()
	}
	e.cutWaiter = cut
	return e, true
}

// lookup finds the socket to relay a stream to and reserves one of the
// stream's connections, or says why not. A migration a peer prepared takes
// streams only from that peer: knowing its id is not enough.
func (r *registry) lookup(h peer.Header, owner string, now time.Time) (string, *entry, string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gcLocked(now)
	e, ok := r.entries[h.ID]
	switch {
	case !ok:
		return "", nil, peer.ReasonUnknownMigration, fmt.Sprintf("migration %s is not prepared on this node", h.ID)
	case e.ended != "":
		return "", nil, "expired_migration", fmt.Sprintf("migration %s has ended (%s)", h.ID, e.ended)
	case !ownerMatches(e.owner, owner) && e.owner != "":
		return "", nil, reasonWrongPeer, fmt.Sprintf("a %s stream of migration %s, which another peer prepared", h.Kind, h.ID)
	case r.closing != "" && !e.started:
		return "", nil, peer.ReasonShuttingDown, fmt.Sprintf("%s: migration %s had not started and is not let in", r.closing, h.ID)
	}
	target, ok := e.m.Targets[h.Kind]
	switch {
	case !ok:
		return "", nil, "stream_not_registered", fmt.Sprintf("migration %s has no %s stream", h.ID, h.Kind)
	case e.m.State == statePreparing:
		return "", nil, "stream_not_registered", fmt.Sprintf("migration %s is not prepared yet", h.ID)
	case e.accepted[h.Kind] >= e.m.Limits[h.Kind]:
		return "", nil, reasonTooManyStreams, fmt.Sprintf("migration %s was prepared for %d %s connection(s), all taken", h.ID, e.m.Limits[h.Kind], h.Kind)
	}
	e.accepted[h.Kind]++
	return target, e, "", ""
}

// release gives back a connection lookup reserved but never relayed.
func (r *registry) release(e *entry, k peer.Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.accepted[k]--
}

func (r *registry) track(e *entry, c net.Conn, k peer.Kind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.ended != "" {
		return false
	}
	e.conns[c] = k
	e.started = true
	return true
}

// markStarted: a direct migration's data moves from its prepare on.
func (r *registry) markStarted(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.started = true
}

func (r *registry) hasStarted(e *entry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return e.started
}

// idle: started, still prepared, and no stream open.
func (r *registry) idle(e *entry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return e.ended == "" && e.started && e.m.State == statePrepared && len(e.conns) == 0
}

func (r *registry) untrack(e *entry, c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(e.conns, c)
}

// end ends a migration, stops its timers and cuts its connections.
func (r *registry) end(id, why string) (*entry, bool) {
	r.mu.Lock()
	e, ok := r.entries[id]
	if !ok || e.ended != "" {
		r.mu.Unlock()
		return nil, false
	}
	e.ended, e.endedAt = why, time.Now()
	for _, t := range e.timers {
		t.Stop()
	}
	stop, waiter := e.stopFinish, e.cutWaiter
	conns := make([]net.Conn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	if stop != nil {
		stop()
	}
	if waiter != nil {
		waiter()
	}
	return e, true
}

// stillFinishing says whether migration id of domain, prepared by owner,
// has a finish running still, with no answer yet.
func (r *registry) stillFinishing(id, domain, owner string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	return ok && e.ended == "" && ownerMatches(e.owner, owner) && e.m.Domain == domain && e.m.State == stateFinishing && e.result == nil
}

// live is migration id while it has not ended.
func (r *registry) live(id string) (*entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	return e, ok && e.ended == ""
}

// recoveriesOf lists the live streams of migration id's recovery.
func (r *registry) recoveriesOf(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for rid, e := range r.entries {
		if e.ended == "" && e.m.RecoveryOf == id {
			out = append(out, rid)
		}
	}
	return out
}

// recovery says whether id names a recovery's streams, which only relay:
// nothing finishes or cancels them.
func (r *registry) recovery(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	return ok && e.m.RecoveryOf != ""
}

// answeredIncoming is migration id of domain, prepared by owner, whose
// finish has answered, whether the registry still holds it live (a split
// whose streams are kept) or has ended it, with that answer.
func (r *registry) answeredIncoming(id, domain, owner string) (peer.IncomingMigration, peer.ControlResponse, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	if !ok || e.in == nil || !ownerMatches(e.owner, owner) || e.m.Domain != domain || e.result == nil {
		return peer.IncomingMigration{}, peer.ControlResponse{}, false
	}
	in := *e.in
	in.Instance = e.instance
	return in, *e.result, true
}

// finishingIncoming is the libvirt side of migration id of domain, prepared
// by owner, whose finish is running still, with no answer yet.
func (r *registry) finishingIncoming(id, domain, owner string) (peer.IncomingMigration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	if !ok || e.ended != "" || e.in == nil || !ownerMatches(e.owner, owner) || e.m.Domain != domain || e.m.State != stateFinishing || e.result != nil {
		return peer.IncomingMigration{}, false
	}
	in := *e.in
	in.Instance = e.instance
	return in, true
}

// setInstance records the guest instance a migration's Prepare started.
func (r *registry) setInstance(e *entry, instance string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.instance = instance
}

// incomingOf is the libvirt side of e, with its guest instance.
func (r *registry) incomingOf(e *entry) peer.IncomingMigration {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := *e.in
	in.Instance = e.instance
	return in
}

// endedIncoming is the libvirt side of an ended migration id of domain,
// prepared by owner, while the registry keeps it.
func (r *registry) endedIncoming(id, domain, owner string) (peer.IncomingMigration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	if !ok || e.ended == "" || e.in == nil || !ownerMatches(e.owner, owner) || e.m.Domain != domain {
		return peer.IncomingMigration{}, false
	}
	in := *e.in
	in.Instance = e.instance
	return in, true
}

// resultOf is e's finish answer, if it has one.
func (r *registry) resultOf(e *entry) (peer.ControlResponse, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.result == nil {
		return peer.ControlResponse{}, false
	}
	return *e.result, true
}

// rearm runs f after d unless the migration has ended by then, on the
// one timer an entry keeps for looks taken again and again, so they do
// not pile up over a long migration. The f of its first call is the one
// run ever after: an entry has one chain of looks.
func (r *registry) rearm(e *entry, d time.Duration, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case e.ended != "":
	case e.look == nil:
		e.look = time.AfterFunc(d, f)
		e.timers = append(e.timers, e.look)
	default:
		e.look.Reset(d)
	}
}

// addTimer runs f after d unless the migration has ended by then.
func (r *registry) addTimer(e *entry, d time.Duration, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.ended != "" {
		return
	}
	e.timers = append(e.timers, time.AfterFunc(d, f))
}

// gcLocked forgets migrations that ended long ago.
func (r *registry) gcLocked(now time.Time) {
	for id, e := range r.entries {
		if e.ended != "" && now.Sub(e.endedAt) > r.keep {
			delete(r.entries, id)
		}
	}
}

// preparedFor counts the incoming migrations owner prepared here that a
// finish may still be asked for: live ones, and ended ones whose finish
// answered, while the registry keeps that answer. Prepares refused,
// cancelled or dropped count for nothing.
func (r *registry) preparedFor(owner string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now, n := time.Now(), 0
	for _, e := range r.entries {
		if e.in == nil || e.owner != owner {
			continue
		}
		if e.ended == "" || e.result != nil && now.Sub(e.endedAt) <= r.keep {
			n++
		}
	}
	return n
}

// active lists the live migrations.
func (r *registry) active() []Migration {
	r.mu.Lock()
	defer r.mu.Unlock()
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

// inFlight lists the live migrations with streams open, and those libvirt
// prepared that have started and not finished: once QEMU's streams close
// at the end of pre-copy, the source's finish is still to come, and cutting
// then would cancel a migration that succeeded.
func (r *registry) inFlight() []inFlight {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []inFlight
	for _, e := range r.entries {
		if e.ended != "" || (len(e.conns) == 0 && !(e.in != nil && e.started)) {
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

// inboundUse is how many migrations (not dry runs) are prepared here and
// not ended.
func (r *registry) inboundUse() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.entries {
		if e.ended == "" && e.in != nil && !e.in.DryRun {
			n++
		}
	}
	return n
}
