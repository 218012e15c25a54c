package migration

import (
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
)

// The tracker observes; what acts on a migration (an operator through the
// API, the convergence policy, a driven migration's owner) makes the
// libvirt call itself, on a connection of its own.

// JobRef names the job an act is for: the source job of Domain (on
// Socket, when named), or the in-flight job with ID, which is how the
// policy acts on the very job it judged.
type JobRef struct {
	Socket, Domain string
	ID             string
}

// Acts is the tracker's part in an act on a migration: it finds the job,
// refuses what must not be done to it, and keeps the request and its
// outcome on the job. The libvirt call is the actor's, made between the
// ask and Asked.Done, on a connection the actor reached before asking: one
// that cannot be reached is refused with nothing recorded, since nothing
// was asked of libvirt.
type Acts struct{ t *Tracker }

// Acts is the way in for whoever acts on a migration.
func (t *Tracker) Acts() Acts { return Acts{t} }

// Asked is an act the tracker let through and recorded as asked.
type Asked struct {
	Socket   string
	Domain   libvirt.Domain
	PostCopy bool // the job is in post-copy: an abort pauses it
	// Message says what the act does to the guest.
	Message string
	done    func(err error) (api.Job, error)
}

// Done records the outcome of the libvirt call and returns the job as it
// stands then; err, when not nil, comes back wrapped with what it meant.
// An Asked not from a tracker records nothing.
func (a *Asked) Done(err error) (api.Job, error) {
	if a.done == nil {
		return api.Job{}, err
	}
	return a.done(err)
}

// actOn finds the source job an act is for; the caller holds t.mu.
func (t *Tracker) actOn(tg JobRef, action string) (*job, error) {
	if tg.ID != "" {
		return t.sourceJobByID(tg.ID, action)
	}
	return t.sourceJob(tg.Socket, tg.Domain, action)
}

// Where names the job an act is for by its ID and socket: the actor
// reaches that socket's libvirt first, then asks for that very job.
func (a Acts) Where(tg JobRef, action string) (JobRef, error) {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	j, err := a.t.actOn(tg, action)
	if err != nil {
		return JobRef{}, err
	}
	return JobRef{Socket: j.view.Socket, Domain: j.view.Domain, ID: j.view.ID}, nil
}

func (t *Tracker) asked(j *job) *Asked {
	return &Asked{Socket: j.view.Socket, Domain: j.ref, PostCopy: j.view.Mode == api.ModePostCopy}
}

// MaxDowntime lets a raise of the allowed downtime of the target's
// pre-copy job to d through; it is recorded once made.
func (a Acts) MaxDowntime(tg JobRef, d time.Duration) (*Asked, error) {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j, err := t.actOn(tg, "set max downtime")
	if err != nil {
		return nil, err
	}
	on, asked := t.asked(j), time.Now()
	on.done = func(err error) (api.Job, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if err != nil {
			return j.view, err
		}
		// A reading the sampler asked for before this set is stale.
		j.maxDowntimeSetAt = asked
		if j.maxDowntime != d {
			t.addEvent(j, time.Now(), "libvirt", fmt.Sprintf("max downtime set to %v (was %v)", d, j.maxDowntime))
		}
		j.maxDowntime, j.maxDowntimeIter = d, j.view.Iteration
		j.view.MaxDowntimeMs = uint64(d / time.Millisecond)
		t.publish(j)
		return j.view, nil
	}
	return on, nil
}

// PostCopy lets a switch of the target's pre-copy job to post-copy
// through, asked by whoever by names ("by the convergence policy"), and
// records the request and a refusal.
func (a Acts) PostCopy(tg JobRef, by string) (*Asked, error) {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j, err := t.actOn(tg, "switch to post-copy")
	if err != nil {
		return nil, err
	}
	if j.view.Mode == api.ModePostCopy {
		return nil, fmt.Errorf("%w: %s is already in post-copy", ErrAlreadyPostCopy, j.view.Domain)
	}
	t.addEventOnce(j, time.Now(), "postcopy", "switch to post-copy requested "+by)
	on := t.asked(j)
	on.done = func(err error) (api.Job, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if err != nil {
			t.addEventOnce(j, time.Now(), "postcopy", "switch refused: "+err.Error())
			return j.view, fmt.Errorf("libvirt refused the switch to post-copy (was the migration started with post-copy allowed?): %w", err)
		}
		return j.view, nil
	}
	return on, nil
}

// DomainRef finds a running domain by name (on socket, when named) and
// says which libvirt socket serves it.
func (t *Tracker) DomainRef(socket, domain string) (string, libvirt.Domain, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.unambiguous(socket, domain); err != nil {
		return "", libvirt.Domain{}, err
	}
	for s, doms := range t.domains {
		if !onSocket(socket, s) {
			continue
		}
		if d, ok := doms[domain]; ok {
			return s, d.Ref, nil
		}
	}
	return "", libvirt.Domain{}, fmt.Errorf("no running domain %q%s on node %s", domain, onWhich(socket), t.cfg.Node)
}
