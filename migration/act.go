package migration

import (
	"context"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
)

// The tracker observes; what acts on a migration (an operator through the
// API, the convergence policy, a driven migration's owner) makes the
// libvirt call itself, on a connection of its own. The tracker finds the
// job, refuses what must not be done to it, and records the request and
// its outcome as evidence on the job.

// JobRef names the job an act is for: the source job of Domain (on
// Socket, when named), or the in-flight job with ID, which is how the
// policy acts on the very job it judged.
type JobRef struct {
	Socket, Domain string
	ID             string
}

// Acting is what the call needs to reach the job's domain.
type Acting struct {
	Socket   string
	Domain   libvirt.Domain
	PostCopy bool
}

// Act is a libvirt call on the job's domain.
type Act struct {
	// Reach, when set, says whether the call can be made now (a
	// connection to the job's libvirt): one that cannot is refused with
	// nothing recorded, since nothing was asked of libvirt. It is asked
	// under the tracker's lock, so it must not call back into it.
	Reach func(on Acting) error
	Call  func(ctx context.Context, on Acting) error
}

// reach checks an act on job j can be made now; the caller holds t.mu.
func (t *Tracker) reach(j *job, action string, a Act) (Acting, error) {
	on := Acting{Socket: j.view.Socket, Domain: j.ref, PostCopy: j.view.Mode == api.ModePostCopy}
	if a.Reach != nil {
		if err := a.Reach(on); err != nil {
			return Acting{}, fmt.Errorf("cannot %s %s now: %w", action, j.view.Domain, err)
		}
	}
	return on, nil
}

// actOn finds the source job an act is for; the caller holds t.mu.
func (t *Tracker) actOn(tg JobRef, action string) (*job, error) {
	if tg.ID != "" {
		return t.sourceJobByID(tg.ID, action)
	}
	return t.sourceJob(tg.Socket, tg.Domain, action)
}

// SetMaxDowntime has call raise the allowed downtime of the target's
// pre-copy job to d, and records it once made.
func (t *Tracker) SetMaxDowntime(ctx context.Context, tg JobRef, d time.Duration, call Act) error {
	t.mu.Lock()
	j, err := t.actOn(tg, "set max downtime")
	var on Acting
	if err == nil {
		on, err = t.reach(j, "set the max downtime of", call)
	}
	t.mu.Unlock()
	if err != nil {
		return err
	}
	asked := time.Now()
	if err := call.Call(ctx, on); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// A reading the sampler asked for before this set is stale.
	j.maxDowntimeSetAt = asked
	if j.maxDowntime != d {
		t.addEvent(j, time.Now(), "libvirt", fmt.Sprintf("max downtime set to %v (was %v)", d, j.maxDowntime))
	}
	j.maxDowntime, j.maxDowntimeIter = d, j.view.Iteration
	j.view.MaxDowntimeMs = uint64(d / time.Millisecond)
	t.publish(j)
	return nil
}

// StartPostCopy has call switch the target's pre-copy job to post-copy,
// asked by whoever by names ("by the convergence policy"), and records the
// request and a refusal.
func (t *Tracker) StartPostCopy(ctx context.Context, tg JobRef, by string, call Act) (api.Job, error) {
	t.mu.Lock()
	j, err := t.actOn(tg, "switch to post-copy")
	if err != nil {
		t.mu.Unlock()
		return api.Job{}, err
	}
	if j.view.Mode == api.ModePostCopy {
		v := j.view
		t.mu.Unlock()
		return v, fmt.Errorf("%w: %s is already in post-copy", ErrAlreadyPostCopy, v.Domain)
	}
	on, err := t.reach(j, "switch to post-copy", call)
	if err != nil {
		t.mu.Unlock()
		return api.Job{}, err
	}
	t.addEventOnce(j, time.Now(), "postcopy", "switch to post-copy requested "+by)
	t.mu.Unlock()
	if err := call.Call(ctx, on); err != nil {
		t.mu.Lock()
		t.addEventOnce(j, time.Now(), "postcopy", "switch refused: "+err.Error())
		t.mu.Unlock()
		return api.Job{}, fmt.Errorf("libvirt refused the switch to post-copy (was the migration started with post-copy allowed?): %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return j.view, nil
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
