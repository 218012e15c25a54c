package libvirtx

import (
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// MemoryBytes is the guest's memory size (its maximum balloon, all the
// memory QEMU holds for it), the most a migration has to send.
func (c *Conn) MemoryBytes(ctx context.Context, dom libvirt.Domain) (uint64, error) {
	kib, err := call(ctx, c, "max memory", func(l *libvirt.Libvirt) (uint64, error) {
		return l.DomainGetMaxMemory(dom)
	})
	return kib << 10, err
}

// ErrMigrationDeadline marks a migration that ran past its deadline.
var ErrMigrationDeadline = errors.New("migration ran past its deadline")

// abortGrace bounds the wait for libvirt to end the migrate call once its
// job is aborted: it cancels QEMU's migration and tears down the target
// first (about a second on the test bed).
const abortGrace = 30 * time.Second

// Migrate runs a peer-to-peer migration (virDomainMigratePerform3Params,
// which returns only when the migration has ended) to the libvirt at
// dconnuri, for at most deadline; ctx ending counts as the deadline
// passing. Past it, the libvirt job is aborted, so that libvirt and QEMU
// stop migrating rather than only Ferry waiting, the guest keeps running on
// the source, and the error wraps ErrMigrationDeadline and says so.
//
// A migration in post-copy cannot be aborted: libvirt refuses, and its
// post-copy "abort" pauses the guest on both sides. The guest already runs
// on the target then, so Migrate waits for the migration to end rather than
// walk away from it (its callers cut the migration's relay once it
// returns). Every other refusal ends the call soon too: the job just ended,
// or the connection is cut as hung.
func (c *Conn) Migrate(ctx context.Context, dom libvirt.Domain, dconnuri string, params []libvirt.TypedParam,
	flags libvirt.DomainMigrateFlags, deadline time.Duration) error {
	_, err := c.perform(ctx, dom, libvirt.OptString{dconnuri}, params, nil, flags, deadline, false)
	return err
}

// Perform runs the source's Perform step of a migration that Ferry drives
// step by step (no peer-to-peer: dconnuri is empty and libvirt never talks
// to the target's libvirt), with cookie from the target's Prepare. It has
// Migrate's deadline and abort rules (a caller that aborts by itself
// passes a deadline it never reaches) and returns libvirt's cookie for the
// target's Finish. In post-copy libvirt returns once the switch is made.
func (c *Conn) Perform(ctx context.Context, dom libvirt.Domain, params []libvirt.TypedParam, cookie []byte,
	flags libvirt.DomainMigrateFlags, deadline time.Duration) ([]byte, error) {
	return c.perform(ctx, dom, libvirt.OptString{}, params, cookie, flags, deadline, false)
}

// PerformResume is Perform of a broken post-copy's resume
// (VIR_MIGRATE_POSTCOPY_RESUME): at its deadline the resumed stream is
// paused (libvirt refuses a plain abort in post-copy), which ends the
// call with the migration held failed again.
func (c *Conn) PerformResume(ctx context.Context, dom libvirt.Domain, params []libvirt.TypedParam, cookie []byte,
	flags libvirt.DomainMigrateFlags, deadline time.Duration) ([]byte, error) {
	return c.perform(ctx, dom, libvirt.OptString{}, params, cookie, flags, deadline, true)
}

func (c *Conn) perform(ctx context.Context, dom libvirt.Domain, dconnuri libvirt.OptString, params []libvirt.TypedParam,
	cookie []byte, flags libvirt.DomainMigrateFlags, deadline time.Duration, postCopy bool) ([]byte, error) {
	type out struct {
		cookie []byte
		err    error
	}
	res := make(chan out, 1)
	go func() {
		ck, err := c.l.DomainMigratePerform3Params(dom, dconnuri, params, cookie, flags)
		if err != nil {
			err = &CallError{Op: "migrate", Socket: c.socket, Err: err}
		}
		res <- out{ck, err}
	}()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	why := fmt.Errorf("%w of %v", ErrMigrationDeadline, deadline)
	select {
	case r := <-res:
		return r.cookie, r.err
	case <-timer.C:
	case <-ctx.Done():
		why = fmt.Errorf("%w: %w", ErrMigrationDeadline, context.Cause(ctx))
	}
	if aerr := c.AbortJob(context.Background(), dom, postCopy); aerr != nil {
		r := <-res
		if r.err != nil {
			return nil, fmt.Errorf("%w; libvirt refused to abort the job (%v), and the migration then failed: %w", why, aerr, r.err)
		}
		return r.cookie, nil
	}
	select {
	case r := <-res:
		if r.err != nil {
			return nil, fmt.Errorf("%w; libvirt job aborted: %w", why, r.err)
		}
		// It completed before the abort reached QEMU.
		return r.cookie, nil
	case <-time.After(abortGrace):
		return nil, fmt.Errorf("%w; libvirt job aborted, but the migrate call had not returned %v later", why, abortGrace)
	}
}
