package drive

import (
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
)

// Record is the node's record of its migrations as the driver meets it:
// what it reads there, where its own account of the migrations it drives
// and prepares is shown, and where its acts are let through and kept. The
// interfaces are the driver's own; ferryd hands it a tracker's views
// (migration.Tracker, its Books and its Acts), a test what it likes.
type Record struct {
	Jobs Jobs
	Acts Acts
	// Books and Trials are the driver's own: the record reads them
	// (migration.Driver, Trials.Holds) and is shown what changed.
	Books  *Books
	Trials *Trials
}

// Jobs is what the driver reads of the node's migration jobs and domains.
type Jobs interface {
	Jobs(all bool) []api.Job
	JobByName(socket, domain string) (api.Job, error)
	InFlight(socket, domain string) bool
	Domains() []api.Domain
	// DomainRef finds a running domain by name (on socket, when named)
	// and the socket that serves it.
	DomainRef(socket, domain string) (string, libvirt.Domain, error)
	// Unambiguous refuses a name two libvirt sockets serve, unless one is
	// named; AmbiguousBeside a name another socket than this one serves.
	Unambiguous(socket, domain string) error
	AmbiguousBeside(socket, domain string) error
}

// Show is where the record shows the driver's account as it changes:
// the migrations it drives (read from Books when told), and what befalls
// them as it happens.
type Show interface {
	DriveBegan(socket, domain string)
	DriveEnded(domain string, ref libvirt.Domain, socket string)
	DriveSettled(socket, domain, uuid string, phase api.Phase)
	PrepareFailed(domain string, ref libvirt.Domain, socket string, start time.Time, info api.ProxyInfo, failure string)
	DriveInDoubt(socket, domain, why string)
	DrivePaused(socket, domain string, until time.Time)
	DriveRecoveryAttempt(socket, domain string, attempt int, err error)
	DriveRecoveryOverdue(socket, domain string)
	DriveResumed(socket, domain string, attempt int, took time.Duration)
	DriveRearmed(socket string, dom libvirt.Domain)
	// Note puts an event on the domain's in-flight source job.
	Note(socket, domain, kind, detail string)
}

// Acts lets an act on a migration through and keeps it (migration.Acts):
// the actor makes the libvirt call between the ask and Asked.Done.
type Acts interface {
	Where(tg migration.JobRef, action string) (migration.JobRef, error)
	Abort(tg migration.JobRef, force bool, by, why string) (*migration.Asked, error)
	MaxDowntime(tg migration.JobRef, d time.Duration) (*migration.Asked, error)
	PostCopy(tg migration.JobRef, by string) (*migration.Asked, error)
}
