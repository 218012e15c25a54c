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
// jobs it observes, and never writes it.
type Driver interface {
	// Driving is the driver's account of the newest migration of domain
	// it drives from socket.
	Driving(socket, domain string) (Driving, bool)
	// Preparing is the newest incoming migration of domain the driver
	// prepared on socket.
	Preparing(socket, domain string) (Preparing, bool)
}

// Driving is the driver's account of a migration it drives.
type Driving struct {
	// Number tells this migration's account from another of the name's:
	// the tracker applies each one to a single job.
	Number uint64
	// Begun is when the driver began the migration.
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

// driving is the driver's account of the domain's migration, unless a job
// that ended took it already; the caller holds t.mu, which the driver's
// never waits for.
func (t *Tracker) driving(key jobKey) (Driving, bool) {
	if t.cfg.Driver == nil {
		return Driving{}, false
	}
	d, ok := t.cfg.Driver.Driving(key.socket, key.domain)
	if !ok || t.applied[key] == d.Number {
		return Driving{}, false
	}
	return d, true
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
