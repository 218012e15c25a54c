package drive

import (
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// driving is one migration this node drives, from Perform to its end:
// Perform here, Finish on the target and Confirm here, then the source's
// sockets torn down and the whole account left on the job.
type driving struct {
	s      *Source
	req    MigrateRequest
	rec    drivenRecord // rec.ID is this node's label of it, rec.TargetID the target's
	conn   *libvirtx.Conn
	dom    libvirt.Domain
	src    *proxy.SourceMigration
	info   api.ProxyInfo
	o      *Owner
	flags  libvirt.DomainMigrateFlags
	params []libvirt.TypedParam
	log    *zap.Logger
	// guard keeps this node's copy from running after the switch to
	// post-copy (nil for a migration that may not switch).
	guard *staleCopyGuard
}

// driveResult is what the steps after Perform found.
type driveResult struct {
	ferr, cerr      error // the target's finish, this node's Confirm
	settled         bool  // false: settled later from the record
	givenUp         bool  // held in post-copy on both nodes for ferryctl recover
	keepStreams     bool  // a post-copy that may still move
	targetPersisted bool
}

func (d *driving) postCopy() bool { return d.flags&libvirt.MigratePostcopy != 0 }

func (d *driving) key() string { return driveKey(d.conn.Socket(), d.req.Domain) }

func (d *driving) run(cookie []byte, deadline time.Duration) driveEnd {
	defer d.s.restoreSpeed(d.log, d.conn, d.dom, d.rec, d.o, d.key())
	start := time.Now()
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	if d.postCopy() {
		d.guard = guardStaleCopy(d.log, d.conn, d.dom)
		defer d.guard.end()
	}
	performCookie, perr := d.perform(cookie, deadline, stopWatch)
	r := driveResult{settled: true}
	if perr == nil && !d.o.MayBePostCopy() {
		if faults.Inject(faults.PauseBeforeFinish) {
			d.log.Warn("fault injected: pausing before the finish", zap.Duration("for", pauseBeforeFinish))
			time.Sleep(pauseBeforeFinish)
		}
		perr = jobStillHeld(d.conn)
	}
	// The streams keep relaying until the target's Finish has returned:
	// in post-copy the guest runs there and pulls its last pages through
	// them. Only the proxy that prepared the migration may finish it.
	if perr != nil {
		r.ferr, r.settled = d.cancelAfterFailedPerform(performCookie)
	} else {
		r = d.finishAndConfirm(performCookie)
	}
	if r.keepStreams {
		// A post-copy libvirt calls failed may still move: its streams go
		// when QEMU says so.
		rc := &recovery{s: d.s, conn: d.conn, dom: d.dom, socket: d.conn.Socket()}
		go closeOnceQEMUStops(rc.sourceInfo, d.src, "migration ended")
	} else {
		d.src.Close("migration ended")
	}
	return d.end(start, perr, r)
}

// perform runs libvirt's Perform, which blocks until the migration ends,
// or in post-copy until the switch, while the tracker samples on the
// pool's connection and the owner acts on the job. At the deadline
// (KubeVirt's 150 s per GiB of guest memory, see policy.DrivenDeadline)
// the owner switches to post-copy if the migration may, and aborts it if
// not, until libvirt takes the abort. Perform has no bound of its own: it
// would abort behind the owner's back. The target drops a migration not
// finished by its deadline, the grace and its prepare timeout, which fails
// a Perform no abort could end.
func (d *driving) perform(cookie []byte, deadline time.Duration, stopWatch chan struct{}) ([]byte, error) {
	memURI := "unix://" + d.src.Paths[peer.KindMemory]
	direct := d.info.DirectURI != ""
	if direct {
		memURI = d.info.DirectURI
	}
	perform := append([]libvirt.TypedParam{{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString(memURI)}}, d.params...)
	d.log.Info("starting a Ferry-driven migration", zap.Bool("postCopy", d.postCopy()), zap.Int("parallel", d.req.Parallel), zap.Duration("deadline", deadline))
	if faults.Inject(faults.PauseBeforePerform) {
		d.log.Warn("fault injected: pausing before Perform", zap.Duration("for", pauseBeforePerform))
		time.Sleep(pauseBeforePerform)
	}
	go d.o.run(deadline, time.Duration(d.req.PostCopyAfterSeconds*float64(time.Second)))
	go d.s.watchHung(d.log, d.conn, d.req.Domain, stopWatch)
	var performCookie []byte
	var perr error
	if direct && !d.src.PerformDirect(func() { abortForShutdown(d.o) }) {
		// Shutting down: not started, as a relayed one's streams would
		// not be let out.
		perr = errors.New("this node is shutting down: the direct migration was not started")
	} else {
		performCookie, perr = d.conn.Perform(context.Background(), d.dom, perform, cookie, d.flags, unbounded)
	}
	if direct {
		d.src.Performed()
	}
	d.s.running.disown(d.key())
	// Not waited for: in pre-copy the guest is paused on both nodes now,
	// and the finish must not wait on a libvirt call of the owner's.
	close(d.o.done)
	return performCookie, perr
}

// cancelAfterFailedPerform does what libvirt's own client does: a failed
// Perform has ended the job here (and resumed the guest, in pre-copy), so
// there is no Confirm; the target is told to drop its copy, and drops it
// by itself if this does not reach it. settled is false when what is left
// here is settled from the record.
func (d *driving) cancelAfterFailedPerform(performCookie []byte) (ferr error, settled bool) {
	fctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	fin, ferr := d.s.proxy.ControlTo(fctx, d.req.Target, d.src.Owner(), peer.ControlRequest{Op: peer.OpFinish, Migration: d.rec.TargetID, Domain: d.req.Domain,
		Cookie: performCookie, Cancelled: true})
	cancel()
	d.log.Info("the target's answer to the cancelled finish", zap.String("outcome", fin.Outcome), zap.Error(ferr))
	// Not always so: a libvirtd restarted after QEMU finished leaves the
	// guest paused here, its job gone. It runs again only on the target's
	// word that its copy is gone.
	if d.guard.pausedAny() {
		return ferr, d.settleStaleCopy(settledOutcome(fin, ferr))
	}
	st, rs, err := d.conn.DomainState(context.Background(), d.dom)
	if err != nil {
		// This node's libvirtd went with the job (restarted): what it made
		// of the guest is read, and settled, from the record.
		return ferr, false
	}
	if st != libvirtx.StatePaused || rs != int32(libvirt.DomainPausedMigration) {
		return ferr, true
	}
	outcome := settledOutcome(fin, ferr)
	what, aerr := applyOutcome(context.Background(), d.conn, d.rec, outcome)
	if outcome == "" || aerr != nil {
		d.log.Error("the guest is left paused here by a failed migration, and the target has not said its copy is gone; settled from its record in the background", zap.NamedError("finish", ferr), zap.Error(aerr))
		return ferr, false
	}
	d.log.Warn("the guest was left paused by a failed migration", zap.String("outcome", outcome), zap.String("here", what))
	return ferr, true
}

// finishAndConfirm settles a migration whose Perform returned: the guest
// is paused here, whole, and may run there, and only the target's word
// decides which copy lives.
func (d *driving) finishAndConfirm(performCookie []byte) driveResult {
	r := driveResult{settled: true}
	fin, outcome := d.s.settleFinish(d.log, d.req, d.rec.TargetID, d.src, performCookie, d.conn, d.dom, d.postCopy(), d.o.MayBePostCopy())
	if fin.Reason == resolvedByOperator {
		d.log.Warn("the migration was settled by an operator", zap.String("outcome", outcome))
	}
	// Only a guest running whole on the target ends the source's copy.
	// With none there the source's runs again (pre-copy); with post-copy
	// failed (split), libvirt keeps the source's paused.
	cancelled := outcome != peer.OutcomeRunning
	if cancelled {
		r.ferr = fmt.Errorf("the target's copy is %s: %s", outcome, fin.Error)
	}
	if outcome == peer.OutcomeStopped {
		// The target's copy never ran, or an operator keeps this one: it
		// is the guest, which libvirt's cancelled Confirm runs again, and
		// one the guard paused runs first (see continueCopy).
		d.guard.end()
		if d.guard.pausedAny() && !d.settleStaleCopy(outcome) {
			r.settled = false
		}
	}
	if d.guard.pausedAny() && outcome == peer.OutcomeSplit {
		// Held as a failed post-copy: by a cancelled Confirm, and as
		// well by libvirt when the drive's connection closes.
		r.settled, r.ferr = d.settleStaleCopy(outcome), errStaleCopy
		return r
	}
	r.cerr = d.conn.Confirm(context.Background(), d.dom, d.params, fin.Cookie, d.flags, cancelled, confirmTimeout)
	if d.guard.pausedAny() && outcome == peer.OutcomeRunning {
		if r.cerr != nil {
			d.log.Warn("libvirt's Confirm failed after this node's copy ran again and was paused", zap.Error(r.cerr))
		}
		// The guest runs whole on the target: the copy paused here goes,
		// stopped by the Confirm or, where that failed, destroyed, and its
		// definition with it where the target keeps one.
		r.settled, r.cerr = d.settleStaleCopy(outcome), nil
		r.targetPersisted = fin.Persisted
		return r
	}
	if r.cerr != nil {
		// Confirm's job is done by hand, by the target's word, or from the
		// record, in the background (settleUnsettled).
		what, aerr := applyOutcome(context.Background(), d.conn, d.rec, outcome)
		d.log.Warn("libvirt's Confirm failed; applied the target's word by hand", zap.Bool("cancelled", cancelled), zap.Error(r.cerr), zap.String("here", what), zap.NamedError("byHand", aerr))
		r.settled = aerr == nil
		if !cancelled {
			// As with libvirt's own client: the guest runs whole on the
			// target, so the migration completed; what is left of it here
			// is settled from its record.
			r.cerr = nil
		}
	}
	if outcome == peer.OutcomeSplit && d.postCopy() && fin.Reason != resolvedByOperator {
		if resp, ok := d.afterSplit(&r); ok {
			fin, outcome, cancelled = resp, peer.OutcomeRunning, false
		}
	}
	if fin.Reason == resolvedByOperator && outcome == peer.OutcomeStopped {
		// Once this node's copy runs again: a pause before the resume would
		// be undone by it.
		go d.s.tellTargetKept(d.log, d.rec)
	}
	r.targetPersisted = !cancelled && fin.Persisted
	r.keepStreams = cancelled && d.postCopy()
	return r
}

// afterSplit handles a post-copy failed with the guest split between the
// nodes: one the operator paused (ferryctl abort --force) is kept for
// them, as resuming it behind their back would undo what they asked for;
// another is recovered, when this node recovers. ok: it was, and runs
// whole on the target.
func (d *driving) afterSplit(r *driveResult) (peer.ControlResponse, bool) {
	if d.s.running.operatorPaused(d.key()) {
		r.ferr = errPausedByOperator
		d.s.keepForRecover(d.log, d.rec)
		r.givenUp = true
		return peer.ControlResponse{}, false
	}
	if d.s.cfg.PostCopyRecoveryTimeout <= 0 {
		return peer.ControlResponse{}, false
	}
	// The Confirm before left libvirt's job here without an owner, which
	// is what lets libvirt complete a resumed migration by itself on both
	// nodes.
	resp, err := d.s.recoverPostCopy(d.log, d.req, d.conn, d.dom, d.rec.TargetID, d.src.Owner(), d.src)
	if err == nil {
		r.ferr, r.cerr = nil, nil
		return resp, true
	}
	r.ferr = err
	if errors.Is(err, errGivenUp) {
		d.s.keepForRecover(d.log, d.rec)
		r.givenUp = true
	}
	return peer.ControlResponse{}, false
}

// end leaves the whole account on the job and says what becomes of the
// migration's record.
func (d *driving) end(start time.Time, perr error, r driveResult) driveEnd {
	var err error
	switch {
	case perr != nil:
		err = perr
	case r.ferr != nil:
		err = fmt.Errorf("the target did not finish it: %w", r.ferr)
	case r.cerr != nil:
		err = fmt.Errorf("libvirt's Confirm on this node: %w", r.cerr)
	}
	info := d.info
	info.Bytes = d.src.Counters.Snapshot()
	info.WireBytesPerSecond = d.src.Counters.WireBytesPerSecond()
	info.Errors = d.src.Errors()
	info.Ended = true
	if perr != nil {
		info.TargetLost = targetLost(r.ferr)
	}
	failure := ""
	if err != nil {
		failure = d.s.failureReason(d.conn.Socket(), d.req.Domain, err, info, start)
		d.log.Warn("Ferry-driven migration failed", zap.String("reason", failure))
	} else {
		d.log.Info("Ferry-driven migration completed", zap.Duration("took", time.Since(start)))
	}
	// From Begin, not Perform: with CHANGE_PROTECTION libvirt's job, and so
	// the tracker's, began there.
	d.s.books.DriveEnded(d.req.Domain, d.dom, d.conn.Socket(), d.rec.Started, info, failure)
	switch {
	case r.givenUp:
		// Held in post-copy on both nodes: its record is ferryctl
		// recover's, and its definition is settled when the guest is.
		return driveGivenUp
	case d.rec.Flags&uint32(libvirt.MigratePersistDest) != 0 && r.settled && !d.s.settleDefinitionNow(d.log, d.rec, r.targetPersisted):
		// One definition, where the guest runs: its retries have the
		// record now, and forget it once done.
		return driveDefinitionLater
	case !r.settled:
		return driveUnsettled
	}
	return driveSettled
}
