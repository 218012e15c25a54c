package drive

import (
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
)

// Record is the node's record of its migrations as the driver meets it:
// what it reads there, where it gives its account of the migrations it
// drives and prepares, and where its acts are let through and kept. The
// interfaces are the driver's own; ferryd hands it a tracker's views
// (migration.Tracker, its Books and its Acts), a test what it likes.
type Record struct {
	Jobs    Jobs
	Account Account
	Acts    Acts
	// Trials are the driver's own: the record reads them (Trials.Holds).
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

// Account is the driver's account of its migrations, which the record
// shows on their jobs: each one it drives and how it ended (settled, in
// doubt, lost, paused for recovery, given up), and the incoming
// migrations it prepares for a peer.
type Account interface {
	Drive(socket, domain string, info api.ProxyInfo)
	Undrive(socket, domain string)
	DriveEnded(domain string, ref libvirt.Domain, socket string, start time.Time, info api.ProxyInfo, failure string)
	PrepareFailed(domain string, ref libvirt.Domain, socket string, start time.Time, info api.ProxyInfo, failure string)
	DriveSettled(socket, domain, uuid string, start time.Time, info api.ProxyInfo, phase api.Phase, reason string)
	DriveInDoubt(socket, domain, why string)
	DriveRecoverable(socket, domain string, d time.Duration)
	DrivePaused(socket, domain string, until time.Time)
	DriveRecoveryAttempt(socket, domain string, attempt int, err error)
	DriveRecoveryOverdue(socket, domain string)
	DriveResumed(socket, domain string, attempt int, took time.Duration)
	DriveRearmed(socket string, dom libvirt.Domain)
	ExpectIncoming(socket, domain, id, peerNode string)
	ForgetIncoming(socket, domain, id string)
	IncomingRecoverable(socket, domain, id string, recoverFor time.Duration)
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
