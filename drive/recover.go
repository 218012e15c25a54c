package drive

import (
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/proxy"
)

// A post-copy migration whose streams broke leaves the guest's memory
// split: QEMU pauses the migration on both nodes and keeps what each has.
// The source here asks the target for a fresh stream and resumes the
// migration over it, attempt after attempt, until it completes or the
// recovery timeout passes; only then is the guest declared lost.

// DefaultPostCopyRecoveryTimeout is how long a broken post-copy is tried
// again before the guest is declared lost.
const DefaultPostCopyRecoveryTimeout = 5 * time.Minute

// Bounds of one recovery attempt's steps.
const (
	recoverAskTimeout = 45 * time.Second
	// recoverWatch bounds an attempt's wait for QEMU's stream to move
	// from the handshake into post-copy again.
	recoverWatch = 30 * time.Second
	// recoveredWait bounds the wait, once QEMU has completed, for libvirt
	// to complete the migration on both nodes by itself.
	recoveredWait = 2 * time.Minute
	recoverPoll   = 200 * time.Millisecond
	maxBackoff    = 5 * time.Second
)

// recovery is one broken post-copy migration being resumed.
type recovery struct {
	s      *Source
	log    *zap.Logger
	req    MigrateRequest
	conn   *libvirtx.Conn
	dom    libvirt.Domain
	tid    string
	owner  string
	until  time.Time
	socket string
	// nudges are an operator's words; gaveUp says one gave up.
	nudges <-chan string
	gaveUp bool
}

// recoverPostCopy resumes a broken post-copy migration, and returns the
// target's answer once the guest runs whole there, or why it did not.
func (s *Source) recoverPostCopy(log *zap.Logger, req MigrateRequest, conn *libvirtx.Conn, dom libvirt.Domain, tid, owner string) (proxy.ControlResponse, error) {
	r := &recovery{s: s, log: log, req: req, conn: conn, dom: dom, tid: tid, owner: owner,
		until: time.Now().Add(s.cfg.PostCopyRecoveryTimeout), socket: conn.Socket()}
	key := driveKey(r.socket, req.Domain)
	r.nudges = s.running.recovering(key, true)
	defer s.running.recovering(key, false)
	s.tracker.DrivePaused(r.socket, req.Domain, r.until)
	log.Warn("post-copy broke: the guest stays paused on both nodes while the migration is resumed", zap.Time("until", r.until))
	for attempt := 1; time.Now().Before(r.until) && !r.gaveUp; attempt++ {
		done, resumed, err := r.attempt(attempt)
		if done {
			break
		}
		if resumed {
			// It ran again, and broke again: a new pause, with its own
			// time to come back.
			r.until = time.Now().Add(s.cfg.PostCopyRecoveryTimeout)
			s.tracker.DrivePaused(r.socket, req.Domain, r.until)
		}
		s.tracker.DriveRecoveryAttempt(r.socket, req.Domain, attempt, err)
		log.Warn("post-copy recovery attempt failed", zap.Int("attempt", attempt), zap.Bool("resumedFirst", resumed), zap.Error(err))
		if !r.sleep(min(time.Duration(attempt)*time.Second, maxBackoff)) {
			break
		}
	}
	if resp, ok := r.settle(); ok {
		return resp, nil
	}
	if r.gaveUp {
		return proxy.ControlResponse{}, errors.New("post-copy broke, and an operator gave up its recovery (ferryctl give-up): the guest's memory stays split between the two nodes")
	}
	return proxy.ControlResponse{}, fmt.Errorf("post-copy broke and was not resumed within %v: the guest's memory stays split between the two nodes", s.cfg.PostCopyRecoveryTimeout)
}

// sleep waits d, or until the recovery's end or an operator's word; false
// once the recovery is over.
func (r *recovery) sleep(d time.Duration) bool {
	left := time.Until(r.until)
	if left <= 0 {
		return false
	}
	select {
	case <-time.After(min(d, left)):
	case w := <-r.nudges:
		r.log.Warn("an operator spoke to the post-copy recovery", zap.String("word", w))
		r.gaveUp = w == NudgeGiveUp
	}
	return !r.gaveUp
}

// attempt runs one resume; done means QEMU completed the migration (or
// the guest is gone from here: libvirt completed it), resumed that the
// stream went back into post-copy before it ended.
func (r *recovery) attempt(n int) (done, resumed bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), recoverAskTimeout)
	defer cancel()
	st, err := r.sourceStatus(ctx)
	if err != nil {
		return false, resumed, err
	}
	switch st {
	case libvirtx.QEMUMigrationCompleted:
		return true, resumed, nil
	case libvirtx.QEMUMigrationPostCopyActive, libvirtx.QEMUMigrationPostCopyRecover, libvirtx.QEMUMigrationPostCopyRecoverSet:
		// A silent link, or a stale attempt: cut it so QEMU pauses.
		if err := r.conn.PauseMigration(ctx, r.dom); err != nil {
			return false, resumed, fmt.Errorf("pausing the source's stalled migration: %w", err)
		}
		return false, resumed, fmt.Errorf("the source's migration was %s: paused it to resume", st)
	case libvirtx.QEMUMigrationPostCopyPaused:
	default:
		return false, resumed, fmt.Errorf("the source's migration is %s in QEMU, not a paused post-copy", st)
	}
	resp, err := r.s.proxy.ControlTo(ctx, r.req.Target, r.owner, proxy.ControlRequest{Op: proxy.OpRecover, Migration: r.tid, Domain: r.req.Domain})
	if err != nil {
		return false, resumed, fmt.Errorf("asking the target for a fresh stream: %w", err)
	}
	if resp.Outcome == proxy.OutcomeRunning {
		return true, resumed, nil
	}
	if proxy.ValidID(resp.Migration) != nil {
		return false, resumed, fmt.Errorf("the target answered the recovery with no valid stream id %q", resp.Migration)
	}
	src, err := r.s.proxy.OpenSource(resp.Migration, r.req.Target, []proxy.Kind{proxy.KindMemory})
	if err != nil {
		return false, resumed, err
	}
	src.BindTarget(r.owner)
	defer src.Close("recovery attempt ended")
	resumedAt := time.Now()
	if err := r.conn.ResumeMigration(ctx, r.dom, src.Paths[proxy.KindMemory], 0); err != nil {
		return false, resumed, fmt.Errorf("resuming the source's migration: %w", err)
	}
	r.log.Info("post-copy resumed", zap.Int("attempt", n), zap.String("stream", resp.Migration))
	// The streams relay for as long as QEMU needs them: until it has
	// completed, or paused again.
	var failing time.Time
	for {
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := r.sourceStatus(wctx)
		wcancel()
		if err != nil && failing.IsZero() {
			failing = time.Now()
		} else if err == nil {
			failing = time.Time{}
		}
		switch {
		case err != nil && time.Since(failing) > recoverWatch:
			return false, resumed, err
		case err != nil:
			// A stream that runs must not be taken for a broken one
			// because libvirt was slow to answer once.
		case st == libvirtx.QEMUMigrationCompleted:
			r.s.tracker.DriveResumed(r.socket, r.req.Domain, n, time.Since(resumedAt))
			return true, resumed, nil
		case st == libvirtx.QEMUMigrationPostCopyPaused:
			return false, resumed, errors.New("the resumed stream broke: QEMU paused the migration again")
		case st == libvirtx.QEMUMigrationPostCopyActive && !resumed:
			resumed = true
			r.s.tracker.DriveResumed(r.socket, r.req.Domain, n, time.Since(resumedAt))
		case !resumed && time.Since(resumedAt) > recoverWatch:
			return false, resumed, fmt.Errorf("the resumed migration is still %s after %v", st, recoverWatch)
		}
		time.Sleep(recoverPoll)
	}
}

// sourceStatus is QEMU's migration state here; a domain libvirt has shut
// off as migrated has completed.
func (r *recovery) sourceStatus(ctx context.Context) (string, error) {
	st, err := r.conn.QEMUMigrationStatus(ctx, r.dom)
	if err == nil {
		return st, nil
	}
	state, reason, serr := r.conn.DomainState(ctx, r.dom)
	if serr == nil && state == libvirtx.StateShutoff && reason == int32(libvirt.DomainShutoffMigrated) {
		return libvirtx.QEMUMigrationCompleted, nil
	}
	if libvirtx.IsNoDomain(serr) {
		return libvirtx.QEMUMigrationCompleted, nil
	}
	return "", fmt.Errorf("asking the source's QEMU: %w", err)
}

// settle asks the target what became of the guest until it runs whole
// there, within recoveredWait of QEMU's completion (libvirt completes
// both sides by itself), or the recovery's end.
func (r *recovery) settle() (proxy.ControlResponse, bool) {
	ctx := context.Background()
	if st, err := r.sourceStatus(ctx); err != nil || st != libvirtx.QEMUMigrationCompleted {
		return proxy.ControlResponse{}, false
	}
	give := time.Now().Add(recoveredWait)
	for {
		actx, cancel := context.WithTimeout(ctx, recoverAskTimeout)
		resp, err := r.s.proxy.ControlTo(actx, r.req.Target, r.owner, proxy.ControlRequest{Op: proxy.OpRecovered, Migration: r.tid, Domain: r.req.Domain})
		cancel()
		if err == nil && resp.Outcome == proxy.OutcomeRunning {
			return resp, true
		}
		if time.Now().After(give) {
			// QEMU here has handed the guest over and stopped: it cannot
			// run twice, only the target's definition is not confirmed.
			r.log.Error("QEMU completed the resumed migration but the target has not said the guest runs whole there; this node keeps its definition", zap.Error(err), zap.String("outcome", resp.Outcome))
			return proxy.ControlResponse{Outcome: proxy.OutcomeRunning}, true
		}
		time.Sleep(time.Second)
	}
}
