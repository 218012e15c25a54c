package drive

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// A post-copy migration whose streams broke leaves the guest's memory
// split: QEMU pauses the migration on both nodes and keeps what each has.
// The source here asks the target for a fresh stream and resumes the
// migration over it, attempt after attempt, until it completes. Ferry
// never gives up on its own while both copies are held: QEMU's
// migrate-recover may be repeated, and a link down for longer than any
// timeout (a switch's firmware update) still comes back. Past the
// recovery timeout the pause is overdue, which alerts; only an operator
// gives up (ferryctl give-up).

// DefaultPostCopyRecoveryTimeout is how long a broken post-copy is tried
// again before its pause is overdue.
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
	// vanishedWait bounds the wait, once the guest is gone from here, for
	// the target to say it runs whole there: a completed migration's two
	// ends settle within moments of each other.
	vanishedWait = 45 * time.Second
	recoverPoll  = 200 * time.Millisecond
	maxBackoff   = 5 * time.Second
	// overdueBackoff spaces the attempts of an overdue recovery: the path
	// back is found within it, and an operator's recover tries at once.
	overdueBackoff = 15 * time.Second
)

// recovery is one broken post-copy migration being resumed.
type recovery struct {
	s   *Source
	log *zap.Logger
	req MigrateRequest
	// conn is the recovery's libvirt connection here, the pool's once
	// the drive's own is gone (see sourceInfo); read through libvirt().
	connMu sync.Mutex
	conn   *libvirtx.Conn
	dom    libvirt.Domain
	tid    string
	owner  string
	until  time.Time
	socket string
	// orig are the migration's own streams, kept until QEMU says they
	// broke: libvirt may call a post-copy failed whose stream goes on.
	orig *proxy.SourceMigration
	// nudges are an operator's words; gaveUp says one gave up.
	nudges <-chan string
	gaveUp bool
	// final: the target's word that stops the attempts (an older ferryd).
	final error
	// overdue: the pause has outlasted the recovery timeout.
	overdue bool
	// vanished: libvirt here no longer has the guest, which is a
	// completion only if the target runs it whole.
	vanished bool
	// thereCompleted: the target answered a recovery that its QEMU had
	// completed: libvirt there completes its job by itself, soon.
	thereCompleted bool
	// byLibvirt: the target's libvirt resumes the post-copy by its own
	// protocol (see source_resume.go), not through Ferry's monitor there;
	// lv is the current attempt's own libvirt connection on that route.
	byLibvirt bool
	lv        *libvirtx.Conn
}

// errGivenUp: an operator gave the recovery up; the record of the
// migration stays while the guest is held, for ferryctl recover.
var errGivenUp = errors.New("post-copy broke, and an operator gave up its recovery (ferryctl give-up): the guest's memory stays split between the two nodes")

// errPausedByOperator: the split was an operator's own forced abort.
var errPausedByOperator = errors.New("post-copy paused by an operator (ferryctl abort --force): the guest's memory stays split between the two nodes until ferryctl recover resumes it")

// errStreamAlive: QEMU's stream still moves; nothing to resume.
var errStreamAlive = errors.New("QEMU's post-copy stream still moves: not resumed, as it has not broken")

// recoverPostCopy resumes a broken post-copy migration, and returns the
// target's answer once the guest runs whole there, or why it did not.
func (s *Source) recoverPostCopy(log *zap.Logger, req MigrateRequest, conn *libvirtx.Conn, dom libvirt.Domain, tid, owner string,
	orig *proxy.SourceMigration) (peer.ControlResponse, error) {
	r := &recovery{s: s, log: log, req: req, conn: conn, dom: dom, tid: tid, owner: owner, orig: orig,
		until: time.Now().Add(s.cfg.PostCopyRecoveryTimeout), socket: conn.Socket()}
	if orig == nil {
		// Picked up from a record (a restarted ferryd): no drive's guard
		// watches this node's copy (see staleCopyGuard).
		g := guardStaleCopy(log, conn, dom)
		defer g.end()
	}
	key := driveKey(r.socket, req.Domain)
	r.nudges = s.running.recovering(key, true)
	defer s.running.recovering(key, false)
	s.books.DrivePaused(r.socket, req.Domain, r.until)
	log.Warn("post-copy broke: the guest stays paused on both nodes while the migration is resumed", zap.Time("until", r.until))
	for attempt := 1; !r.gaveUp && r.final == nil; attempt++ {
		if s.running.operatorPaused(key) {
			// An operator's forced abort paused a resumed stream: not
			// resumed again behind their back (ferryctl recover does).
			log.Warn("post-copy paused by an operator's forced abort: its recovery waits for ferryctl recover")
			r.gaveUp = true
			break
		}
		done, resumed, err := r.attempt(attempt)
		if done {
			break
		}
		if resumed || errors.Is(err, errStreamAlive) {
			// It ran again, and broke again (or never broke): a new
			// pause, with its own time to come back.
			r.until, r.overdue = time.Now().Add(s.cfg.PostCopyRecoveryTimeout), false
			s.books.DrivePaused(r.socket, req.Domain, r.until)
		}
		if !errors.Is(err, errStreamAlive) {
			s.books.DriveRecoveryAttempt(r.socket, req.Domain, attempt, err)
		}
		log.Warn("post-copy recovery attempt failed", zap.Int("attempt", attempt), zap.Bool("resumedFirst", resumed), zap.Error(err))
		if !r.overdue && !time.Now().Before(r.until) {
			r.overdue = true
			s.books.DriveRecoveryOverdue(r.socket, req.Domain)
			// Its path back may be gone for days: its outbound slot goes
			// to migrations that move (a resumed one needs none).
			s.running.releaseHolds(driveKey(r.socket, req.Domain))
			log.Error("post-copy not resumed within --postcopy-recovery-timeout: overdue; the guest stays paused on both nodes and Ferry goes on trying until it resumes or an operator gives up (ferryctl give-up)",
				zap.Duration("timeout", s.cfg.PostCopyRecoveryTimeout), zap.Int("attempts", attempt))
		}
		if !r.sleep(r.backoff(attempt)) {
			break
		}
	}
	if r.orig != nil {
		r.releaseOrig()
	}
	if resp, ok := r.settle(); ok {
		r.endStaleSource()
		return resp, nil
	}
	switch {
	case r.vanished:
		return peer.ControlResponse{}, errors.New("post-copy broke, and the guest vanished from this node's libvirt during its recovery while the target does not run it whole: the guest is lost")
	case r.gaveUp:
		return peer.ControlResponse{}, errGivenUp
	case r.final != nil:
		return peer.ControlResponse{}, fmt.Errorf("post-copy broke, and cannot be resumed: %w; the guest's memory stays split between the two nodes", r.final)
	}
	return peer.ControlResponse{}, errors.New("post-copy broke, and its recovery ended without the target saying the guest runs whole there")
}

// libvirt is the recovery's libvirt connection here.
func (r *recovery) libvirt() *libvirtx.Conn {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	return r.conn
}

// backoff is the wait after a failed attempt.
func (r *recovery) backoff(attempt int) time.Duration {
	if r.overdue {
		return overdueBackoff
	}
	return min(time.Duration(attempt)*time.Second, maxBackoff)
}

// sleep waits d, or until an operator's word; false once given up.
func (r *recovery) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
	case w := <-r.nudges:
		r.log.Warn("an operator spoke to the post-copy recovery", zap.String("word", w))
		r.gaveUp = w == NudgeGiveUp
	}
	return !r.gaveUp
}

// stallWait is how long a stream QEMU calls post-copy-active is watched
// for progress before it is taken for broken (a silent link) and paused.
const stallWait = 5 * time.Second

// attempt runs one resume; done means QEMU completed the migration (or
// the guest is gone from here: libvirt completed it), resumed that the
// stream went back into post-copy before it ended.
func (r *recovery) attempt(n int) (done, resumed bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), recoverAskTimeout)
	defer cancel()
	defer r.endResume()
	info, err := r.sourceInfo(ctx)
	if errors.Is(err, errSourceGone) {
		r.vanished = true
		return true, false, nil
	}
	if err != nil {
		return false, false, err
	}
	switch info.Status {
	case libvirtx.QEMUMigrationCompleted:
		return true, false, nil
	case libvirtx.QEMUMigrationPostCopyActive, libvirtx.QEMUMigrationPostCopyRecover, libvirtx.QEMUMigrationPostCopyRecoverSet:
		if info.Status == libvirtx.QEMUMigrationPostCopyActive && r.moving(ctx, info) {
			return false, false, errStreamAlive
		}
		// A silent link, or a stale attempt: cut it so QEMU pauses.
		if err := r.libvirt().PauseMigration(ctx, r.dom); err != nil {
			return false, false, fmt.Errorf("pausing the source's stalled migration: %w", err)
		}
		return false, false, fmt.Errorf("the source's migration was %s with no progress for %v: paused it to resume", info.Status, stallWait)
	case libvirtx.QEMUMigrationPostCopyPaused:
	case libvirtx.QEMUMigrationFailed:
		// QEMU fails rather than pauses a post-copy whose stream broke in
		// its completion, starts this node's copy again, and resumes no
		// failed migration.
		if st, rs, err := r.libvirt().DomainState(ctx, r.dom); err == nil && st == libvirtx.StateRunning {
			pauseStaleCopy(ctx, r.log, r.libvirt(), r.dom, rs)
		}
		r.final = errStaleCopy
		return false, false, r.final
	default:
		return false, false, fmt.Errorf("the source's migration is %s in QEMU, not a paused post-copy", info.Status)
	}
	if r.orig != nil {
		// QEMU has let go of them.
		r.orig.Close("post-copy broke")
		r.orig = nil
	}
	resp, err := r.ask(ctx)
	var ce *peer.ControlError
	if errors.As(err, &ce) && (ce.Reason == "unknown_op" || ce.Reason == "incoming_disabled" || ce.Reason == peer.ReasonGuestGone) {
		// A target that cannot resume it never will: an older ferryd, or
		// one whose copy of the guest is gone (its node rebooted).
		r.final = err
	}
	if err != nil {
		return false, false, fmt.Errorf("asking the target for a fresh stream: %w", err)
	}
	if resp.Outcome == peer.OutcomeRunning {
		r.thereCompleted = true
		return true, false, nil
	}
	if peer.ValidID(resp.Migration) != nil {
		return false, false, fmt.Errorf("the target answered the recovery with no valid stream id %q", resp.Migration)
	}
	kinds := []peer.Kind{peer.KindMemory}
	qemu, err := sourceQEMU(r.socket, r.dom.Name, kinds)
	if err != nil {
		return false, false, err
	}
	src, err := r.s.proxy.OpenSource(resp.Migration, r.req.Target, kinds, qemu, daemonPID(r.libvirt()))
	if err != nil {
		return false, false, err
	}
	src.BindTarget(r.owner)
	if r.byLibvirt {
		return r.resumeByLibvirt(n, src, resp.Cookie)
	}
	resumedAt := time.Now()
	if err := r.libvirt().ResumeMigration(ctx, r.dom, src.Paths[peer.KindMemory]); err != nil {
		src.Close("resume refused")
		return false, false, fmt.Errorf("resuming the source's migration: %w", err)
	}
	r.log.Info("post-copy resumed", zap.Int("attempt", n), zap.String("stream", resp.Migration))
	return r.watch(n, src, resumedAt)
}

// watch follows a resumed stream, which relays for as long as QEMU needs
// it: until QEMU has completed, or paused again. libvirt not answering
// meanwhile ends nothing: only QEMU's own word closes the stream.
func (r *recovery) watch(n int, src *proxy.SourceMigration, resumedAt time.Time) (done, resumed bool, err error) {
	var silent time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, err := r.sourceInfo(ctx)
		cancel()
		if errors.Is(err, errSourceGone) {
			// Completed and removed (a transient guest), or destroyed: the
			// target says which.
			r.vanished = true
			src.Close("the guest is gone from this node")
			return true, resumed, nil
		}
		if err != nil {
			if silent.IsZero() {
				silent = time.Now()
			}
			if time.Since(silent) > recoverWatch && int(time.Since(silent)/time.Second)%30 == 0 {
				r.log.Warn("libvirt does not answer for the resumed post-copy; its stream keeps relaying", zap.Duration("for", time.Since(silent)), zap.Error(err))
			}
			time.Sleep(time.Second)
			continue
		}
		silent = time.Time{}
		switch st := info.Status; {
		case st == libvirtx.QEMUMigrationCompleted:
			r.s.books.DriveResumed(r.socket, r.req.Domain, n, time.Since(resumedAt))
			src.Close("migration completed")
			return true, resumed, nil
		case st == libvirtx.QEMUMigrationPostCopyPaused:
			src.Close("the resumed stream broke")
			return false, resumed, errors.New("the resumed stream broke: QEMU paused the migration again")
		case st == libvirtx.QEMUMigrationPostCopyActive:
			if !resumed {
				resumed = true
				r.s.books.DriveResumed(r.socket, r.req.Domain, n, time.Since(resumedAt))
			}
		case st == libvirtx.QEMUMigrationPostCopyRecover || st == libvirtx.QEMUMigrationPostCopyRecoverSet:
			if time.Since(resumedAt) > recoverWatch {
				// The handshake never finished: QEMU pauses on this.
				pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
				perr := r.libvirt().PauseMigration(pctx, r.dom)
				pcancel()
				src.Close("the resume never took")
				return false, resumed, fmt.Errorf("the resumed migration is still %s after %v (paused it: %v)", st, recoverWatch, perr)
			}
		default:
			src.Close("migration " + st)
			return false, resumed, fmt.Errorf("the resumed migration is %s in QEMU", st)
		}
		time.Sleep(recoverPoll)
	}
}

// releaseOrig closes the migration's own streams once QEMU no longer
// moves data through them: however the recovery ended, Ferry never cuts a
// stream that runs.
func (r *recovery) releaseOrig() {
	orig := r.orig
	r.orig = nil
	go closeOnceQEMUStops(r.sourceInfo, orig, "post-copy recovery over")
}

// closeOnceQEMUStops closes a post-copy's source streams once QEMU here
// says it no longer moves data through them (or the guest is gone from
// here): libvirt's word that a post-copy failed is not QEMU's, whose
// stream goes on without libvirtd.
func closeOnceQEMUStops(info func(context.Context) (libvirtx.MigrationStatus, error), src *proxy.SourceMigration, why string) {
	var failing time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := info(ctx)
		cancel()
		switch {
		case err == nil && st.Status != libvirtx.QEMUMigrationPostCopyActive, errors.Is(err, errSourceGone):
			src.Close(why)
			return
		case err == nil:
			failing = time.Time{}
		case failing.IsZero():
			failing = time.Now()
		case time.Since(failing) > unaskableFor:
			// Nobody answers for the guest (its libvirt gone with its
			// pod): its streams are let go, not kept forever.
			src.Close(why + "; the guest's libvirt has not answered for " + unaskableFor.String())
			return
		}
		time.Sleep(2 * time.Second)
	}
}

// unaskableFor is how long libvirt may not answer for a guest before its
// post-copy streams are let go.
const unaskableFor = 10 * time.Minute

// moving says whether QEMU's post-copy stream makes progress over
// stallWait.
func (r *recovery) moving(ctx context.Context, first libvirtx.MigrationStatus) bool {
	select {
	case <-time.After(stallWait):
	case <-ctx.Done():
		return false
	}
	next, err := r.sourceInfo(ctx)
	return err == nil && (next.Status != first.Status || next.RAM.Transferred > first.RAM.Transferred)
}

// errSourceGone: libvirt here no longer runs the guest: no domain of it
// (libvirt removes a transient guest once its migration completes, but
// also one destroyed), or one shut off for another reason than a
// completed migration (a persistent guest destroyed, crashed). Only the
// target can tell which.
var errSourceGone = errors.New("the guest is gone from this node's libvirt")

// sourceInfo is QEMU's migration state here, asked on the recovery's own
// connection, or the node's pool's when that one is gone (a libvirtd
// restarted meanwhile); a domain libvirt has shut off as migrated has
// completed.
func (r *recovery) sourceInfo(ctx context.Context) (libvirtx.MigrationStatus, error) {
	conn := r.libvirt()
	info, err := conn.QEMUMigrationInfo(ctx, r.dom)
	asked := conn
	if err != nil {
		if c, cerr := r.s.cfg.Conns.Conn(r.socket); cerr == nil && c != conn {
			asked = c
			if info, err = c.QEMUMigrationInfo(ctx, r.dom); err == nil {
				r.connMu.Lock()
				r.conn = c
				r.connMu.Unlock()
			}
		}
	}
	if err == nil {
		return info, nil
	}
	// Asked where the last question went: the recovery's own connection
	// may be closed (the drive that made it has ended).
	state, reason, serr := asked.DomainState(ctx, r.dom)
	if serr == nil && state == libvirtx.StateShutoff && reason == int32(libvirt.DomainShutoffMigrated) {
		return libvirtx.MigrationStatus{Status: libvirtx.QEMUMigrationCompleted}, nil
	}
	if libvirtx.IsNoDomain(serr) || serr == nil && state == libvirtx.StateShutoff {
		return libvirtx.MigrationStatus{}, errSourceGone
	}
	return libvirtx.MigrationStatus{}, fmt.Errorf("asking the source's QEMU: %w", err)
}

// endStaleSource destroys this node's copy of a guest the target runs
// whole while QEMU here still holds a paused post-copy (the target's QEMU
// had every page when the streams broke): it never completes by itself,
// and is what Confirm would have stopped.
func (r *recovery) endStaleSource() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := r.sourceInfo(ctx)
	// A failed one too: QEMU fails a resumed stream broken in its
	// completion, and libvirt ends no job of it by itself.
	if err != nil || info.Status != libvirtx.QEMUMigrationPostCopyPaused && info.Status != libvirtx.QEMUMigrationPostCopyRecover &&
		info.Status != libvirtx.QEMUMigrationPostCopyRecoverSet && info.Status != libvirtx.QEMUMigrationFailed {
		return
	}
	if err := r.libvirt().Destroy(ctx, r.dom); err != nil {
		r.log.Error("the target runs the guest whole; this node's stale post-copy copy could not be destroyed: destroy it by hand", zap.Error(err))
		return
	}
	r.log.Warn("the target runs the guest whole: this node's stale post-copy copy, which QEMU held paused, was destroyed", zap.String("qemu", info.Status))
}

// settle asks the target what became of the guest. After QEMU here has
// completed, until the target says it runs whole there (libvirt completes
// both sides by itself); otherwise once, since a recovery that looks lost
// from here may have completed there.
func (r *recovery) settle() (peer.ControlResponse, bool) {
	ctx := context.Background()
	info, err := r.sourceInfo(ctx)
	if errors.Is(err, errSourceGone) {
		r.vanished = true
	}
	// Either QEMU's completion is asked after until the target's libvirt
	// has caught up: the source's QEMU, holding its copy paused, never
	// says completed when the target's did first.
	completed := err == nil && info.Status == libvirtx.QEMUMigrationCompleted || r.thereCompleted
	give := time.Now().Add(recoveredWait)
	if r.vanished {
		give = time.Now().Add(vanishedWait)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, recoverAskTimeout)
		resp, err := r.s.proxy.ControlTo(actx, r.req.Target, r.owner, peer.ControlRequest{Op: peer.OpRecovered, Migration: r.tid, Domain: r.req.Domain})
		cancel()
		if err == nil && resp.Outcome == peer.OutcomeRunning {
			r.vanished = false
			return resp, true
		}
		if !completed && !r.vanished {
			return resp, false
		}
		if r.vanished && time.Now().After(give) && err == nil && resp.Outcome != "" {
			// The target's own word that it does not run the guest whole;
			// one it cannot give (unreachable, unsettled) is asked again.
			r.log.Error("the guest vanished from this node's libvirt during the recovery, and the target says it does not run it whole", zap.String("outcome", resp.Outcome))
			return resp, false
		}
		if r.vanished && time.Now().After(give) {
			if !r.sleep(min(time.Since(give)/4+time.Second, overdueBackoff)) {
				return resp, false
			}
			continue
		}
		if time.Now().After(give) {
			// QEMU here has handed the guest over and stopped: it cannot
			// run twice, only the target's definition is not confirmed.
			r.log.Error("QEMU completed the resumed migration but the target has not said the guest runs whole there; this node keeps its definition", zap.Error(err), zap.String("outcome", resp.Outcome))
			return peer.ControlResponse{Outcome: peer.OutcomeRunning}, true
		}
		time.Sleep(time.Second)
	}
}
