package drive

import (
	"strings"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/migration/policy"
)

// drives tracks the migrations this ferryd is driving, keyed by socket
// NUL domain: their owners while Perform runs, and an operator's decision
// for the one in doubt.
type drives struct {
	mu      sync.Mutex
	running map[string]*driveState
}

type driveState struct {
	done chan struct{} // closed when the drive ends
	// decide carries an operator's "keep source" or "keep target"
	// (peer.OutcomeStopped or OutcomeRunning), taken only in doubt.
	decide  chan string
	inDoubt bool
	// nudge carries an operator's word to a paused post-copy's recovery:
	// try now, or give up; recovering says one is under way.
	nudge      chan string
	recovering bool
	// operatorPause: an operator's forced abort in post-copy is under
	// way or made; the split it makes is theirs to resume.
	operatorPause bool
	// hung: this node's libvirtd does not answer the migration's own
	// connection (its keepalive hears nothing).
	hung bool
	// id is the migration's ID on this node; owner and driven are set
	// while its Perform runs.
	id     string
	owner  *Owner
	driven Driven
	// release ends what was held for the migration: its slot, the
	// domain's quiet.
	release []func()
	// speed is the bandwidth cap last set on it, in MiB/s, and heldBack
	// whether that was a trickle while another had the link.
	speed    uint64
	heldBack bool
}

// Driven is what the convergence policy needs of a migration Ferry
// drives: what it was started with, and its owner to act through.
type Driven struct {
	Settings policy.Settings
	PostCopy bool
	// Deadline is the backstop the owner enforces itself.
	Deadline time.Duration
	Act      policy.Actuator
	// CapMiBs is the request's own bandwidth cap (0: none), which every
	// share of the link stays under.
	CapMiBs uint64
	// HeldBack says the scheduler holds it at a trickle while another
	// has the link: its passes say nothing of whether it converges, and
	// the policy leaves it alone.
	HeldBack bool
}

func newDrives() *drives { return &drives{running: map[string]*driveState{}} }

func driveKey(socket, domain string) string { return socket + "\x00" + domain }

func (ds *drives) start(key string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if _, busy := ds.running[key]; busy {
		return false
	}
	ds.running[key] = &driveState{done: make(chan struct{}), decide: make(chan string, 1), nudge: make(chan string, 1)}
	return true
}

func (ds *drives) end(key string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		close(st.done)
		delete(ds.running, key)
		for _, r := range st.release {
			r()
		}
	}
}

// releaseHolds lets go of what key's drive holds (its slot, its quiet)
// while the key stays taken: a migration settled from its record, or a
// post-copy waiting for its path back, moves no data.
func (ds *drives) releaseHolds(key string) {
	ds.mu.Lock()
	var release []func()
	if st, ok := ds.running[key]; ok {
		release, st.release = st.release, nil
	}
	ds.mu.Unlock()
	for _, r := range release {
		r()
	}
}

// hold keeps release until key's drive ends.
func (ds *drives) hold(key string, release func()) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.release = append(st.release, release)
	} else {
		release()
	}
}

// own hands key's migration to its owner while Perform runs.
func (ds *drives) own(key, id string, o *Owner, dr Driven) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.id, st.owner, st.driven = id, o, dr
	}
}

// disown ends the owner's time: Perform has returned.
func (ds *drives) disown(key string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.owner, st.driven.Act = nil, nil
	}
}

// owner is the owner of the migration of domain (on socket, if named)
// while its Perform runs; nil when none is, or when two sockets serve the
// name and none was named.
func (ds *drives) owner(socket, domain string) *Owner {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var found *Owner
	for k, st := range ds.running {
		s, d, _ := strings.Cut(k, "\x00")
		if d != domain || (socket != "" && s != socket) || st.owner == nil {
			continue
		}
		if found != nil {
			return nil
		}
		found = st.owner
	}
	return found
}

// driven is the migration with that ID while its Perform runs.
func (ds *drives) driven(id string) (Driven, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for _, st := range ds.running {
		if st.id == id && st.owner != nil {
			d := st.driven
			d.HeldBack = st.heldBack
			return d, true
		}
	}
	return Driven{}, false
}

// decisions is the channel an operator's decision for key arrives on;
// nil (never ready) for a key not driven.
func (ds *drives) decisions(key string) <-chan string {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		return st.decide
	}
	return nil
}

// setHung marks key's migration as waiting on a libvirtd that does not
// answer, or answering again.
func (ds *drives) setHung(key string, on bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.hung = on
	}
}

// hungCount is how many migrations wait on a libvirtd that does not
// answer.
func (ds *drives) hungCount() int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	n := 0
	for _, st := range ds.running {
		if st.hung {
			n++
		}
	}
	return n
}

// inDoubt says whether key's migration is in doubt.
func (ds *drives) inDoubt(key string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	st, ok := ds.running[key]
	return ok && st.inDoubt
}

// settled ends key's doubt: the target has spoken, and a decision an
// operator queued before it is dropped, never applied later.
func (ds *drives) settled(key string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.inDoubt = false
		select {
		case <-st.decide:
		default:
		}
	}
}

// doubt marks key's migration in doubt: from now an operator may decide it.
func (ds *drives) doubt(key string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.inDoubt = true
	}
}

// decide hands an operator's decision to the migration of domain in doubt
// (on socket, if named), and returns its key; false when none is.
func (ds *drives) decide(socket, domain, outcome string) (string, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var found *driveState
	var key string
	for k, st := range ds.running {
		s, d, _ := strings.Cut(k, "\x00")
		if d != domain || (socket != "" && s != socket) || !st.inDoubt {
			continue
		}
		if found != nil {
			return "", false // two sockets: the operator must name one
		}
		found, key = st, k
	}
	if found == nil {
		return "", false
	}
	select {
	case found.decide <- outcome:
	default: // a decision is already on its way
	}
	return key, true
}

// Operator's words to a paused post-copy's recovery.
const (
	NudgeNow    = "now"
	NudgeGiveUp = "give-up"
)

// recovering marks key's migration as a paused post-copy being resumed
// (not in doubt: ferryctl resolve has nothing to settle), and returns the
// channel an operator's word arrives on.
func (ds *drives) recovering(key string, on bool) <-chan string {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.recovering, st.inDoubt = on, false
		return st.nudge
	}
	return nil
}

// nudge hands an operator's word to the recovery of domain's paused
// post-copy (on socket, if named); false when none is under way.
func (ds *drives) nudge(socket, domain, word string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var found *driveState
	for k, st := range ds.running {
		s, d, _ := strings.Cut(k, "\x00")
		if d != domain || (socket != "" && s != socket) || !st.recovering {
			continue
		}
		if found != nil {
			return false
		}
		found = st
	}
	if found == nil {
		return false
	}
	if word == NudgeGiveUp {
		// Giving up outranks a pending "now".
		select {
		case <-found.nudge:
		default:
		}
	}
	select {
	case found.nudge <- word:
	default:
	}
	return true
}

// markOperatorPause marks (or, on false, unmarks) the migration of domain
// as paused by an operator's forced abort; false when none runs.
func (ds *drives) markOperatorPause(socket, domain string, on bool) (found, was bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for k, st := range ds.running {
		if s, d, _ := strings.Cut(k, "\x00"); d == domain && (socket == "" || s == socket) {
			was, st.operatorPause = st.operatorPause, on
			return true, was
		}
	}
	return false, false
}

// operatorPaused says an operator's forced abort paused key's migration.
func (ds *drives) operatorPaused(key string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	st, ok := ds.running[key]
	return ok && st.operatorPause
}

// PauseByOperator marks the driven migration of domain (on socket, if
// named) as about to be paused by an operator's forced abort, before the
// abort is sent: the split it makes is then not resumed by Ferry but by
// ferryctl recover. undo takes the mark back when the abort failed, unless
// an earlier forced abort had made it: a retry refused must not unmark a
// pause that was made.
func (s *Source) PauseByOperator(socket, domain string) (undo func()) {
	if found, was := s.running.markOperatorPause(socket, domain, true); !found || was {
		return func() {}
	}
	return func() { s.running.markOperatorPause(socket, domain, false) }
}

// Recovery hands an operator's word (NudgeNow, NudgeGiveUp) to the
// recovery of domain's paused post-copy; NudgeNow starts again one given
// up whose guest is still held here. False when there is none.
func (s *Source) Recovery(socket, domain, word string) bool {
	if s.running.nudge(socket, domain, word) {
		return true
	}
	return word == NudgeNow && s.rearm(socket, domain)
}

// stopAll gives running migrations a grace period to finish before ferryd
// stops relaying them: cutting the proxy would fail them.
func (ds *drives) stopAll() {
	ds.mu.Lock()
	waits := make([]chan struct{}, 0, len(ds.running))
	for _, st := range ds.running {
		waits = append(waits, st.done)
	}
	ds.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for _, w := range waits {
		select {
		case <-w:
		case <-deadline:
			return
		}
	}
}

// Resolve hands an operator's decision (peer.OutcomeStopped: keep the
// source's copy; OutcomeRunning: keep the target's) to the migration of
// domain in doubt, on socket if named; false when none is.
func (s *Source) Resolve(socket, domain, outcome string) bool {
	_, ok := s.running.decide(socket, domain, outcome)
	return ok
}

// Owner is the owner of the driven migration of domain on socket while
// its Perform runs, or nil.
func (s *Source) Owner(socket, domain string) *Owner { return s.running.owner(socket, domain) }

// Driven is the driven migration with that ID while its Perform runs.
func (s *Source) Driven(id string) (Driven, bool) { return s.running.driven(id) }

// Settle waits, at most limit, for driven migrations to record their end:
// once the proxy is gone, libvirt's calls return soon.
func (s *Source) Settle(limit time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.running.stopAll()
	}()
	select {
	case <-done:
	case <-time.After(limit):
	}
}

// ownedDrive is a migration whose Perform runs, with its owner.
type ownedDrive struct {
	key        string
	owner      *Owner
	speed, cap uint64
}

// owned lists the migrations whose owners run now.
func (ds *drives) owned() []ownedDrive {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var out []ownedDrive
	for k, st := range ds.running {
		if st.owner != nil {
			out = append(out, ownedDrive{key: k, owner: st.owner, speed: st.speed, cap: st.driven.CapMiBs})
		}
	}
	return out
}

func (ds *drives) setSpeed(key string, mibs uint64, heldBack bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.speed, st.heldBack = mibs, heldBack
	}
}

// shared says whether the scheduler set key's speed.
func (ds *drives) shared(key string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	st, ok := ds.running[key]
	return ok && st.speed > 0
}
