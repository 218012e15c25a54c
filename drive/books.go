package drive

import (
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
)

// Books is the driver's account of the migrations it drives and prepares:
// for each domain, the newest migration it drives from a socket and the
// newest incoming one it prepared there. The driver keeps it; the node's
// record reads it (migration.Driver), is told when it changed (Show), and
// says when the job that showed an account has ended: an ended migration's
// account is kept until then, however long the record's sight of libvirt
// is cut, and let go at once after.
type Books struct {
	show Show

	mu        sync.Mutex
	last      uint64
	driving   map[bookKey]migration.Driving
	preparing map[bookKey]migration.Preparing
}

type bookKey struct{ socket, domain string }

// NewBooks returns empty books; name the record that shows them (ShowOn)
// before the driver writes in them.
func NewBooks() *Books {
	return &Books{
		driving:   map[bookKey]migration.Driving{},
		preparing: map[bookKey]migration.Preparing{},
	}
}

// ShowOn names where the books' changes are shown (the record reading
// them, which exists only once it is given the books to read).
func (b *Books) ShowOn(s Show) { b.show = s }

// Driving implements migration.Driver.
func (b *Books) Driving(socket, domain string) (migration.Driving, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.driving[bookKey{socket, domain}]
	return d, ok
}

// Preparing implements migration.Driver.
func (b *Books) Preparing(socket, domain string) (migration.Preparing, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.preparing[bookKey{socket, domain}]
	return p, ok
}

// Shown implements migration.Driver: account number was shown on a job
// that ended.
func (b *Books) Shown(socket, domain string, number uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := bookKey{socket, domain}
	d, ok := b.driving[key]
	switch {
	case !ok || d.Number != number:
	case d.Ended:
		delete(b.driving, key)
	default:
		// The record is told of its end when the driver gives it.
		d.Shown = true
		b.driving[key] = d
	}
}

// IncomingEnded implements migration.Driver: the target job of incoming
// migration id ended.
func (b *Books) IncomingEnded(socket, domain, id string) {
	b.ForgetIncoming(socket, domain, id)
}

// Drive begins the account of the domain's migration from socket, through
// the proxy info names.
func (b *Books) Drive(socket, domain string, info api.ProxyInfo) {
	b.mu.Lock()
	b.last++
	b.driving[bookKey{socket, domain}] = migration.Driving{Number: b.last, Proxy: &info}
	b.mu.Unlock()
	// Told outside b.mu: the record reads the books under its own lock.
	b.show.DriveBegan(socket, domain)
}

// DriveRecoverable says the domain's driven post-copy is resumed for up to
// d should it break.
func (b *Books) DriveRecoverable(socket, domain string, d time.Duration) {
	b.change(socket, domain, func(a *migration.Driving) { a.RecoverFor = d })
}

// Undrive drops an account that was begun and never ended (the migration
// was not started after all).
func (b *Books) Undrive(socket, domain string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d, ok := b.driving[bookKey{socket, domain}]; ok && !d.Ended {
		delete(b.driving, bookKey{socket, domain})
	}
}

// DriveEnded gives the driver's final word on the migration of domain it
// began at start: the proxy's figures and, if it failed, why ("" when it
// completed, the guest running on the target).
func (b *Books) DriveEnded(domain string, dom libvirt.Domain, socket string, start time.Time, info api.ProxyInfo, failure string) {
	b.end(socket, domain, start, info, failure, failure == "", false)
	b.show.DriveEnded(domain, dom, socket)
}

// DriveSettled gives the end of a migration a previous ferryd of this node
// was driving, settled with the target since: phase is how it ended,
// reason why if it did not complete.
func (b *Books) DriveSettled(socket, domain, uuid string, start time.Time, info api.ProxyInfo, phase api.Phase, reason string) {
	b.end(socket, domain, start, info, reason, phase == api.PhaseCompleted, true)
	b.show.DriveSettled(socket, domain, uuid, phase)
}

func (b *Books) end(socket, domain string, start time.Time, info api.ProxyInfo, failure string, completed, settled bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := bookKey{socket, domain}
	d, ok := b.driving[key]
	if !ok || d.Ended {
		// Told of a migration not begun here (a previous ferryd's), or
		// of a second end: a new account.
		b.last++
		d = migration.Driving{Number: b.last}
	}
	// An account a job showed already stays until the record has had
	// the end too (it says Shown again).
	d.Begun, d.Proxy, d.Failure = start, &info, failure
	d.Ended, d.Completed, d.Settled = true, completed, settled
	b.driving[key] = d
}

func (b *Books) change(socket, domain string, f func(*migration.Driving)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d, ok := b.driving[bookKey{socket, domain}]; ok {
		f(&d)
		b.driving[bookKey{socket, domain}] = d
	}
}

// ExpectIncoming records the incoming migration id of domain prepared for
// peerNode, for its target job, which libvirt's Prepare is about to start.
func (b *Books) ExpectIncoming(socket, domain, id, peerNode string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.preparing[bookKey{socket, domain}] = migration.Preparing{ID: id, PeerNode: peerNode}
}

// IncomingRecoverable says incoming migration id is resumed by its source
// for up to recoverFor if its post-copy breaks.
func (b *Books) IncomingRecoverable(socket, domain, id string, recoverFor time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.preparing[bookKey{socket, domain}]; ok && p.ID == id {
		p.RecoverFor = recoverFor
		b.preparing[bookKey{socket, domain}] = p
	}
}

// ForgetIncoming drops incoming migration id, which will not come.
func (b *Books) ForgetIncoming(socket, domain, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.preparing[bookKey{socket, domain}].ID == id {
		delete(b.preparing, bookKey{socket, domain})
	}
}

// The rest is told as it happens: the record shows it.

// PrepareFailed shows a migration that failed before libvirt started a job.
func (b *Books) PrepareFailed(domain string, ref libvirt.Domain, socket string, start time.Time, info api.ProxyInfo, failure string) {
	b.show.PrepareFailed(domain, ref, socket, start, info, failure)
}

// DriveInDoubt shows the migration in doubt: the target has not said
// whether the guest runs there.
func (b *Books) DriveInDoubt(socket, domain, why string) { b.show.DriveInDoubt(socket, domain, why) }

// DrivePaused shows the broken post-copy resumed until the given time.
func (b *Books) DrivePaused(socket, domain string, until time.Time) {
	b.show.DrivePaused(socket, domain, until)
}

// DriveRecoveryAttempt shows an attempt to resume that ended with err.
func (b *Books) DriveRecoveryAttempt(socket, domain string, attempt int, err error) {
	b.show.DriveRecoveryAttempt(socket, domain, attempt, err)
}

// DriveRecoveryOverdue shows a recovery past its timeout, going on.
func (b *Books) DriveRecoveryOverdue(socket, domain string) {
	b.show.DriveRecoveryOverdue(socket, domain)
}

// DriveResumed shows an attempt whose stream went on.
func (b *Books) DriveResumed(socket, domain string, attempt int, took time.Duration) {
	b.show.DriveResumed(socket, domain, attempt, took)
}

// DriveRearmed shows again, as paused, a recovery an operator gave up and
// starts again; the caller has begun its account, recoverable.
func (b *Books) DriveRearmed(socket string, dom libvirt.Domain) { b.show.DriveRearmed(socket, dom) }

// Note puts an event on the domain's in-flight source job.
func (b *Books) Note(socket, domain, kind, detail string) { b.show.Note(socket, domain, kind, detail) }
