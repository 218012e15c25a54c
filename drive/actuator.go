package drive

import (
	"context"
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
func (a *Actuator) Abort(ctx context.Context, ref migration.JobRef, force bool, by, why string) (res api.AbortResult, err error) {
	o, err := a.owner(ref)
	if err != nil {
		return api.AbortResult{}, err
	}
	if force && by == migration.AbortByOperator && a.source != nil {
		// Marked before libvirt pauses it: the driver, seeing the split,
		// must know it is the operator's.
		on := ref.Socket
		if o != nil {
			on = o.Socket()
		}
		undo := a.source.PauseByOperator(on, ref.Domain)
		defer func() {
			if err != nil {
				undo()
			}
		}()
	}
	if o != nil {
		return o.Abort(ctx, by, why, force)
	}
	ask := func(at migration.JobRef) (*migration.Asked, error) { return a.acts.Abort(at, force, by, why) }
	on, j, err := a.onPool(ctx, ref, "abort", ask, func(ctx context.Context, c *libvirtx.Conn, on *migration.Asked) error {
		return c.AbortJob(ctx, on.Domain, on.PostCopy)
	})
	return migration.AbortResult(on, j, err), err
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
// judged: through the owner while Ferry's Perform of it runs, else on its
// libvirt.
func (a *Actuator) Policy(jobID string) policy.Actuator {
	if a.source != nil {
		if dr, ok := a.source.Driven(jobID); ok && dr.Act != nil {
			return dr.Act
		}
	}
	return poolPolicy{a, migration.JobRef{ID: jobID}}
}

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
