package drive

import (
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// pauseWait bounds how long a target QEMU that had not noticed the break
// takes to pause once told to.
const pauseWait = 10 * time.Second

// Recover has the paused target QEMU of a broken post-copy migration
// listen at socket for the source's resumed stream: by libvirt's own
// resume protocol, or through the monitor its Prepare gave it where this
// node's libvirt crashes on that (see libvirtx.ResumesPostCopy). What
// the proxy recorded at the prepare decides (m.LibvirtResume: the QEMU got
// no monitor), so a restarted ferryd chooses as its predecessor did; no
// socket another QEMU could plant, and no call libvirt's incoming job
// refuses (the guest's XML takes a job on libvirt 11.0 to 11.4).
func (in *Target) Recover(ctx context.Context, m peer.IncomingMigration, socket string, r peer.Resume) (string, []byte, error) {
	dom, err := in.heldHere(ctx, m)
	if err != nil {
		return "", nil, err
	}
	if m.LibvirtResume {
		return in.recoverByLibvirt(ctx, m, dom, socket, r)
	}
	if r.ByLibvirt {
		return "", nil, errors.New("this node resumes the post-copy through Ferry's monitor of its QEMU, not by libvirt's protocol")
	}
	st, err := in.recoverByMonitor(ctx, m, socket)
	return st, nil, err
}

// recoverByMonitor arms the resume on the monitor the Prepare gave the
// target QEMU: libvirt's failed incoming job holds the domain here, and
// libvirt 11.2 and 11.3 answer no call that takes a job on it.
func (in *Target) recoverByMonitor(ctx context.Context, m peer.IncomingMigration, socket string) (string, error) {
	pid, err := libvirtx.QEMUPID(in.socket, m.Domain)
	if err != nil {
		return "", fmt.Errorf("the guest's QEMU here cannot be named: %w", err)
	}
	q, err := libvirtx.DialQMP(ctx, m.MonitorPath, pid)
	if err != nil {
		return "", fmt.Errorf("the guest's QEMU here has no Ferry monitor to recover it by: %w", err)
	}
	defer q.Close()
	st, err := q.MigrationStatus(ctx)
	if err != nil {
		return "", err
	}
	switch st {
	case libvirtx.QEMUMigrationCompleted:
		return st, nil
	case libvirtx.QEMUMigrationPostCopyPaused:
	case libvirtx.QEMUMigrationPostCopyActive, libvirtx.QEMUMigrationPostCopyRecover, libvirtx.QEMUMigrationPostCopyRecoverSet:
		// It has not seen the break (a silent link), or waits on an
		// attempt the source has given up: cut its stream so it pauses.
		if err := q.MigratePause(ctx); err != nil {
			return "", err
		}
		if st, err = awaitPaused(ctx, q); err != nil {
			return "", err
		}
		if st == libvirtx.QEMUMigrationCompleted {
			return st, nil
		}
	default:
		return "", fmt.Errorf("the guest's migration here is %s in QEMU, not a paused post-copy", st)
	}
	if err := q.MigrateRecover(ctx, socket); err != nil {
		return "", err
	}
	in.log.Info("the target QEMU listens for the resumed post-copy", zap.String("domain", m.Domain), zap.String("migration", m.ID))
	return libvirtx.QEMUMigrationPostCopyPaused, nil
}

// awaitPaused waits for QEMU to pause its post-copy migration.
func awaitPaused(ctx context.Context, q *libvirtx.QMP) (string, error) {
	deadline := time.Now().Add(pauseWait)
	for {
		st, err := q.MigrationStatus(ctx)
		if err != nil || st == libvirtx.QEMUMigrationPostCopyPaused || st == libvirtx.QEMUMigrationCompleted {
			return st, err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("QEMU's migration is still %s %v after migrate-pause", st, pauseWait)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// heldHere finds the migration's own guest here in post-copy.
func (in *Target) heldHere(ctx context.Context, m peer.IncomingMigration) (libvirt.Domain, error) {
	c, err := in.conn()
	if err != nil {
		return libvirt.Domain{}, err
	}
	dom, err := c.LookupDomain(ctx, m.Domain)
	switch {
	case libvirtx.IsNoDomain(err):
		return dom, fmt.Errorf("%w: libvirt has no domain %s", peer.ErrGuestGone, m.Domain)
	case err == nil && !sameInstance(m.Instance, dom):
		return dom, fmt.Errorf("%w: another domain has the name %s now", peer.ErrGuestGone, m.Domain)
	case err != nil:
		return dom, fmt.Errorf("the migration's guest is not here: %w", PeerError(err))
	}
	state, reason, err := c.DomainState(ctx, dom)
	if err != nil {
		return dom, PeerError(err)
	}
	if state == libvirtx.StateShutoff {
		return dom, fmt.Errorf("%w: the guest is shut off here (reason %d)", peer.ErrGuestGone, reason)
	}
	if !libvirtx.InPostCopy(state, reason) {
		return dom, fmt.Errorf("the guest is %s (reason %d) here, not in post-copy", state, reason)
	}
	return dom, nil
}

// HoldRecorded has the tracker pause, not fail, the broken post-copy of
// each incoming migration a previous ferryd left held here: its source
// resumes it. It is told before libvirt can be asked (before the tracker
// first looks); once libvirt answers, the records whose guest is no
// longer held (resumed, or destroyed by an operator since) are
// forgotten.
func (in *Target) HoldRecorded(ctx context.Context, held []peer.IncomingMigration) {
	if in.recoverFor <= 0 || len(held) == 0 {
		return
	}
	for _, m := range held {
		in.books.ExpectIncoming(in.socket, m.Domain, m.ID, m.PeerNode)
		in.books.IncomingRecoverable(in.socket, m.Domain, m.ID, in.recoverFor)
	}
	go in.forgetUnheld(ctx, held)
}

// forgetUnheld forgets the expectations of those of held whose guest
// libvirt no longer holds in post-copy here.
func (in *Target) forgetUnheld(ctx context.Context, held []peer.IncomingMigration) {
	for {
		c, err := in.conn()
		if err == nil {
			for _, m := range held {
				actx, cancel := context.WithTimeout(ctx, cancelTimeout)
				if _, ok := heldHere(actx, c, m); !ok {
					in.books.ForgetIncoming(in.socket, m.Domain, m.ID)
				}
				cancel()
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// Recovered says whether a recovered migration's guest runs whole here,
// and whether it is defined here (libvirt's Finish saved its definition
// before the guest first ran here). A guest still in post-copy (libvirt
// completes it by itself once QEMU has) is not settled: asked again.
func (in *Target) Recovered(ctx context.Context, m peer.IncomingMigration) (string, bool, error) {
	c, err := in.conn()
	if err != nil {
		return "", false, err
	}
	dom, err := c.LookupDomain(ctx, m.Domain)
	if err != nil || !sameInstance(m.Instance, dom) {
		// Gone since: it ran here, and the source's copy never runs again.
		return "", false, fmt.Errorf("the guest is not here to tell: %v", PeerError(err))
	}
	state, reason, err := c.DomainState(ctx, dom)
	switch {
	case err != nil:
		return "", false, PeerError(err)
	case state == libvirtx.StateRunning && reason == int32(libvirt.DomainRunningPostcopyFailed):
		return peer.OutcomeSplit, false, nil
	case libvirtx.InPostCopy(state, reason):
		// libvirt's job runs on; a job statistics call would wait for it.
		return "", false, fmt.Errorf("the guest is still in post-copy here (%s, reason %d)", state, reason)
	}
	outcome, err := in.Outcome(ctx, m)
	if err != nil || outcome != peer.OutcomeRunning {
		return outcome, false, err
	}
	return outcome, in.Persisted(ctx, m), nil
}
