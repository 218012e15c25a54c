package policy

import (
	"context"
	"time"
)

// Actuator carries decisions out on one migration: a migration Ferry
// drives through its owner, which applies them one at a time against
// libvirt's current job state; any other through the tracker.
type Actuator interface {
	SetMaxDowntime(ctx context.Context, d time.Duration) error
	StartPostCopy(ctx context.Context) error
	Abort(ctx context.Context, why string) error
}

// Apply carries d out through a.
func Apply(ctx context.Context, a Actuator, d Decision) error {
	switch d.Action {
	case RaiseDowntime, SwitchOver:
		return a.SetMaxDowntime(ctx, d.MaxDowntime)
	case PostCopy:
		return a.StartPostCopy(ctx)
	case Abort:
		return a.Abort(ctx, d.Reason)
	}
	return nil
}
