package drive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
)

// Actuator carries out the acts on a migration that an operator (through
// the API) or the convergence policy asks for. A migration Ferry drives is
// acted on by its owner alone, on the migration's own connection, one act
// at a time against libvirt's state; any other (KubeVirt's) on the pool's
// connection to its libvirt. The tracker keeps the record of both.
type Actuator struct {
	source *Source // nil where Ferry drives nothing
	conns  Conns
	acts   Acts
	names  Jobs
}

// switchAnswerTimeout is longer than one libvirt call of an owner's, so
// that a switch it takes is answered.
const switchAnswerTimeout = ownerCallTimeout + 5*time.Second

// NewActuator acts on the migrations of rec; source is nil where Ferry
// drives nothing.
func NewActuator(source *Source, conns Conns, rec Record) *Actuator {
	return &Actuator{source: source, conns: conns, acts: rec.Acts, names: rec.Jobs}
}

// Abort aborts the domain's migration (on ref's socket, when named): see
// migration.Acts.Abort for what force and a post-copy abort mean.
func (a *Actuator) Abort(ctx context.Context, ref migration.JobRef, force bool, by, why string) (api.AbortResult, error) {
	o, err := a.owner(ref)
	if err != nil {
		return api.AbortResult{}, err
	}
	// An operator's forced abort is marked before libvirt pauses the
	// migration: the driver, seeing the split, must know it is the
	// operator's, and not resume it.
	undo := func() {}
	mark := func(socket string) {
		if force && by == migration.AbortByOperator && a.source != nil {
			undo = a.source.PauseByOperator(socket, ref.Domain)
		}
	}
	var res api.AbortResult
	if o != nil {
		mark(o.Socket())
		res, err = o.Abort(ctx, by, why, force)
	} else {
		ask := func(at migration.JobRef) (*migration.Asked, error) {
			mark(at.Socket)
			return a.acts.Abort(at, force, by, why)
		}
		var on *migration.Asked
		var j api.Job
		on, j, err = a.onPool(ctx, ref, "abort", ask, func(ctx context.Context, c *libvirtx.Conn, on *migration.Asked) error {
			return c.AbortJob(ctx, on.Domain, on.PostCopy)
		})
		res = migration.AbortResult(on, j, err)
	}
	if err != nil && !errors.Is(err, errBusy) {
		// Not made. A busy owner may still make it: the mark stays.
		undo()
	}
	return res, err
}

// StartPostCopy switches the domain's migration to post-copy, asked by
// whoever by names ("by the convergence policy").
func (a *Actuator) StartPostCopy(ctx context.Context, ref migration.JobRef, by string) (api.Job, error) {
	o, err := a.owner(ref)
	switch {
	case err != nil:
		return api.Job{}, err
	case o != nil:
		ctx, cancel := context.WithTimeout(ctx, switchAnswerTimeout)
		defer cancel()
		return o.StartPostCopy(ctx, by)
	}
	ask := func(at migration.JobRef) (*migration.Asked, error) { return a.acts.PostCopy(at, by) }
	_, j, err := a.onPool(ctx, ref, "switch to post-copy", ask, func(ctx context.Context, c *libvirtx.Conn, on *migration.Asked) error {
		return c.StartPostCopy(ctx, on.Domain)
	})
	return j, err
}

// SetMaxDowntime raises the allowed downtime of a migration Ferry does not
// drive; one it drives is the owner's to set (Policy).
func (a *Actuator) SetMaxDowntime(ctx context.Context, ref migration.JobRef, d time.Duration) error {
	ask := func(at migration.JobRef) (*migration.Asked, error) { return a.acts.MaxDowntime(at, d) }
	_, _, err := a.onPool(ctx, ref, "set the max downtime of", ask, func(ctx context.Context, c *libvirtx.Conn, on *migration.Asked) error {
		return c.SetMaxDowntime(ctx, on.Domain, d)
	})
	return err
}

// Policy carries the convergence policy's decisions out on the job it
// judged: one Ferry drives through its owner alone, and, once the owner is
// gone (its Perform returned), not at all; any other on its libvirt.
func (a *Actuator) Policy(j api.Job) policy.Actuator {
	if j.Proxy == nil || j.Proxy.MigrationID == "" {
		return poolPolicy{a, migration.JobRef{ID: j.ID}}
	}
	if a.source != nil {
		if dr, ok := a.source.Driven(j.Proxy.MigrationID); ok && dr.Act != nil {
			return dr.Act
		}
	}
	return unowned{j.Domain}
}

// unowned refuses the policy's acts on a migration Ferry drives whose
// owner is gone: nothing but the owner acts on it.
type unowned struct{ domain string }

func (u unowned) refuse() error {
	return fmt.Errorf("%w: the migration of %s that Ferry drives has no owner now; the policy does not act on it", migration.ErrNoJob, u.domain)
}

func (u unowned) SetMaxDowntime(context.Context, time.Duration) error { return u.refuse() }
func (u unowned) StartPostCopy(context.Context) error                 { return u.refuse() }
func (u unowned) Abort(context.Context, string) error                 { return u.refuse() }

// owner is the owner of a migration Ferry drives of ref's domain, while
// its Perform runs. With no socket named, a domain of the name on any
// other libvirt makes the request ambiguous.
func (a *Actuator) owner(ref migration.JobRef) (*Owner, error) {
	if ref.ID != "" || a.source == nil {
		return nil, nil
	}
	o := a.source.Owner(ref.Socket, ref.Domain)
	if o != nil && ref.Socket == "" {
		if err := a.names.AmbiguousBeside(o.Socket(), ref.Domain); err != nil {
			return nil, err
		}
	}
	return o, a.names.Unambiguous(ref.Socket, ref.Domain)
}

// onPool acts on the job ref names on the pool's connection to its
// libvirt: found first, its libvirt reached, then asked of the tracker
// for that very job, the call made and its outcome recorded. An act whose
// libvirt cannot be reached is refused with nothing recorded, since
// nothing was asked of libvirt.
func (a *Actuator) onPool(ctx context.Context, ref migration.JobRef, action string,
	ask func(migration.JobRef) (*migration.Asked, error),
	call func(ctx context.Context, c *libvirtx.Conn, on *migration.Asked) error) (*migration.Asked, api.Job, error) {
	at, err := a.acts.Where(ref, action)
	if err != nil {
		return nil, api.Job{}, err
	}
	c, err := a.conns.Conn(at.Socket)
	if err != nil {
		return nil, api.Job{}, fmt.Errorf("cannot %s %s now: %w", action, at.Domain, err)
	}
	on, err := ask(at)
	if err != nil {
		return nil, api.Job{}, err
	}
	j, err := on.Done(call(ctx, c, on))
	return on, j, err
}

// poolPolicy is the policy's face of the Actuator for a job Ferry does
// not drive.
type poolPolicy struct {
	a   *Actuator
	job migration.JobRef
}

func (p poolPolicy) SetMaxDowntime(ctx context.Context, d time.Duration) error {
	return p.a.SetMaxDowntime(ctx, p.job, d)
}

func (p poolPolicy) StartPostCopy(ctx context.Context) error {
	_, err := p.a.StartPostCopy(ctx, p.job, "by the convergence policy")
	return err
}

func (p poolPolicy) Abort(ctx context.Context, why string) error {
	_, err := p.a.Abort(ctx, p.job, false, migration.AbortByPolicy, why)
	return err
}
