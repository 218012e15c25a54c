package drive

import (
	"sync"
	"time"
)

// Trials are the domains held by a migration that moves nothing: a dry
// run, on either node, or a migration between Begin and Perform, which
// may yet be cancelled. libvirt runs a migration job for each (and on a
// target, a guest) that the node's record must not take for a migration:
// it asks Holds before it opens a job. The driver keeps them; one Trials
// serves a node's source and target sides. A nil Trials holds nothing.
type Trials struct {
	mu   sync.Mutex
	held map[trialKey]trial
	// epochs number the holds' generations, never reused: an end that
	// comes after End, or after the domain's holds all ended and new ones
	// began, belongs to no hold there is.
	epochs int
	// grace is how long past a hold's end the domain's lifecycle events
	// and job readings, which may arrive late, are still not taken for a
	// migration.
	grace time.Duration
}

type trialKey struct{ socket, domain string }

// trial is the holds on a domain: how many, and their generation.
type trial struct{ n, epoch int }

// trialGrace is Trials' grace.
const trialGrace = 2 * time.Second

// NewTrials holds nothing yet.
func NewTrials() *Trials { return &Trials{held: map[trialKey]trial{}, grace: trialGrace} }

// Hold holds domain on socket until end is called and the grace has
// passed, or End.
func (ts *Trials) Hold(socket, domain string) (end func()) {
	if ts == nil {
		return func() {}
	}
	key := trialKey{socket, domain}
	ts.mu.Lock()
	held, ok := ts.held[key]
	if !ok {
		ts.epochs++
		held.epoch = ts.epochs
	}
	held.n++
	ts.held[key] = held
	epoch := held.epoch
	ts.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			time.AfterFunc(ts.grace, func() {
				ts.mu.Lock()
				defer ts.mu.Unlock()
				// Ended since by End: this hold is gone already, and
				// a later one is not this one's to end.
				if tr, ok := ts.held[key]; ok && tr.epoch == epoch {
					if tr.n--; tr.n <= 0 {
						delete(ts.held, key)
						return
					}
					ts.held[key] = tr
				}
			})
		})
	}
}

// End ends at once every hold on domain: a real migration of it starts,
// which must be seen from its first moment.
func (ts *Trials) End(socket, domain string) {
	if ts == nil {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.held, trialKey{socket, domain})
}

// Holds says whether a hold is on domain now: what the node's record asks
// before it opens a job.
func (ts *Trials) Holds(socket, domain string) bool {
	if ts == nil {
		return false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.held[trialKey{socket, domain}].n > 0
}
