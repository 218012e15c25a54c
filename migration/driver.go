package migration

import (
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// Driver is what the tracker reads of the migrations this node's driver
// (package drive) drives and prepares. The driver keeps that account and
// tells the tracker when it changed (Books); the tracker shows it on the
// jobs it observes, and says when a job that showed it has ended, so that
// no later job of the name takes it and the driver may let it go.
type Driver interface {
	// Driving is the driver's account of the newest migration of domain
	// it drives from socket.
	Driving(socket, domain string) (Driving, bool)
	// Preparing is the newest incoming migration of domain the driver
	// prepared on socket.
	Preparing(socket, domain string) (Preparing, bool)
	// Shown says a job that ended has shown account number: once the
	// migration has ended too, the driver keeps it no longer.
	Shown(socket, domain string, number uint64)
	// IncomingEnded says the target job of incoming migration id ended.
	IncomingEnded(socket, domain, id string)
}

// Driving is the driver's account of a migration it drives.
type Driving struct {
	// Number tells this migration's account from another of the name's:
	// the tracker applies each one to a single job, and Shown says it did.
	Number uint64
	Shown  bool
	// Begun is when the driver began the migration (its record's start),
	// given with its end: only an ended account is matched to a job by it.
	Begun time.Time
	Proxy *api.ProxyInfo
	// RecoverFor is how long a broken post-copy of it is resumed; 0, it
	// is not.
	RecoverFor time.Duration
	// Ended: the driver has given its final word. Failure is why the
	// migration failed, if it did (libvirt keeps no record of why; the
	// driver heard it); Completed, that the guest runs on the target, and
	// Settled that this was learned from the target after a restart.
	Ended     bool
	Failure   string
	Completed bool
	Settled   bool
}

// Preparing is an incoming migration as the driver's prepare left it.
type Preparing struct {
	ID, PeerNode string
	// RecoverFor is how long its source resumes a broken post-copy; 0, it
	// does not.
	RecoverFor time.Duration
}

// completedBy is the evidence for a job the driver's word completed.
func (d Driving) completedBy() string {
	switch {
	case !d.Completed:
		return ""
	case d.Settled:
		return driverSettledIt
	default:
		return driverSawCompletion
	}
}

// account is the driver's account of the domain's migration; the caller
// holds t.mu, which the driver never waits for.
func (t *Tracker) account(key jobKey) (Driving, bool) {
	if t.cfg.Driver == nil {
		return Driving{}, false
	}
	return t.cfg.Driver.Driving(key.socket, key.domain)
}

// driving is the account, unless a job that ended showed it already.
func (t *Tracker) driving(key jobKey) (Driving, bool) {
	if d, ok := t.account(key); ok && !d.Shown {
		return d, true
	}
	return Driving{}, false
}

// shown tells the driver that account d was shown on a job that ended.
func (t *Tracker) shown(key jobKey, d Driving) {
	t.cfg.Driver.Shown(key.socket, key.domain, d.Number)
}

// incomingEnded tells the driver that the target job of its prepare ended.
func (t *Tracker) incomingEnded(j *job) {
	key := jobKey{j.view.Socket, j.view.Domain}
	if p, ok := t.preparing(key); ok && j.view.Role == api.RoleTarget && p.ID == j.view.IncomingID {
		t.cfg.Driver.IncomingEnded(key.socket, key.domain, p.ID)
	}
}

// preparing is the domain's newest prepared incoming migration; the
// caller holds t.mu.
func (t *Tracker) preparing(key jobKey) (Preparing, bool) {
	if t.cfg.Driver == nil {
		return Preparing{}, false
	}
	return t.cfg.Driver.Preparing(key.socket, key.domain)
}

// byDeadline says whether the driver's failure is its deadline's abort,
// which libvirt records as a cancel, as if a client had asked.
func byDeadline(failure string) bool {
	return strings.Contains(failure, libvirtx.ErrMigrationDeadline.Error())
}
