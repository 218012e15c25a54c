package drive

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// settleFinish asks the target to finish until it says for certain whether
// the guest runs there (a lost answer, a reset, a restarted target ferryd
// are asked again), and returns its answer and that outcome. Past
// inDoubtAfter the job shows InDoubt; the guest stays paused here
// meanwhile, which is the one state that cannot become two guests.
func (s *Source) settleFinish(log *zap.Logger, req MigrateRequest, tid string, src *proxy.SourceMigration, cookie []byte,
	conn *libvirtx.Conn, dom libvirt.Domain, postCopy, switched bool) (peer.ControlResponse, string) {
	socket := conn.Socket()
	// A post-copy whose streams broke is paused by QEMU here: that alone
	// settles it as split, whatever the target can say meanwhile (a cut
	// link, a ferryd gone), and its recovery starts at once.
	var paused <-chan struct{}
	if postCopy && s.cfg.PostCopyRecoveryTimeout > 0 {
		stop := make(chan struct{})
		defer close(stop)
		paused = watchPaused(conn, dom, stop)
	}
	// A pre-copy Finish returns within moments; a post-copy one when the
	// last page has arrived, however long that takes. An attempt waits
	// that long: only a broken connection (keepalive, the user timeout)
	// or a refusal ends it early, and only those count towards doubt.
	wait := finishWait
	if postCopy {
		wait = postCopyFinishWait
	}
	first, inDoubt := time.Now(), false
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		if paused != nil {
			// Ends with the attempt: cancel() below closes ctx.
			go func() {
				select {
				case <-paused:
					cancel()
				case <-ctx.Done():
				}
			}()
		}
		// A pre-copy whose job this node's libvirt dropped meanwhile (its
		// libvirtd restarted: see jobStillHeld) is finished as cancelled:
		// the target runs the guest only if an earlier attempt already
		// made it, and answers so.
		cancelled := !switched && jobStillHeld(conn) != nil
		resp, err := s.proxy.ControlTo(ctx, req.Target, src.Owner(), peer.ControlRequest{Op: peer.OpFinish,
			Migration: tid, Domain: req.Domain, Cookie: cookie, Cancelled: cancelled})
		cancel()
		if outcome := settledOutcome(resp, err); outcome != "" {
			s.running.settled(driveKey(socket, req.Domain))
			if inDoubt {
				log.Warn("the migration's outcome is settled", zap.String("outcome", outcome), zap.Int("attempts", attempt))
			}
			return resp, outcome
		}
		if isClosed(paused) {
			return pausedHere(), peer.OutcomeSplit
		}
		log.Warn("the target's finish gave no outcome; asking again", zap.Int("attempt", attempt), zap.Error(err))
		if !inDoubt && time.Since(first) >= inDoubtAfter {
			inDoubt = true
			why := fmt.Sprintf("in doubt: the target has not said whether the guest runs there (%d attempts over %s; last: %v); the guest stays paused on this node until it does, or an operator decides (ferryctl resolve)", attempt, time.Since(first).Round(time.Second), err)
			log.Error("migration in doubt", zap.String("why", why))
			s.books.DriveInDoubt(socket, req.Domain, why)
			s.running.doubt(driveKey(socket, req.Domain))
		}
		select {
		case outcome := <-s.running.decisions(driveKey(socket, req.Domain)):
			return peer.ControlResponse{Reason: resolvedByOperator, Error: "settled by an operator: the target's copy is taken as " + outcome}, outcome
		case <-paused:
			return pausedHere(), peer.OutcomeSplit
		case <-time.After(min(time.Duration(attempt)*time.Second, 5*time.Second)):
		}
	}
}

// pausedHere is the settled answer of a post-copy QEMU paused here.
func pausedHere() peer.ControlResponse {
	return peer.ControlResponse{Reason: reasonPausedHere, Error: "post-copy broke: QEMU paused the migration on this node"}
}

// reasonPausedHere marks a split this node saw for itself.
const reasonPausedHere = "paused_here"

// watchPaused closes its channel once libvirt has the source paused by a
// broken post-copy; it stops looking when stop closes.
func watchPaused(conn *libvirtx.Conn, dom libvirt.Domain, stop <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		t := time.NewTicker(pausedPoll)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), pausedPoll*4)
			st, rs, err := conn.DomainState(ctx, dom)
			cancel()
			if err == nil && st == libvirtx.StatePaused && rs == int32(libvirt.DomainPausedPostcopyFailed) {
				close(out)
				return
			}
		}
	}()
	return out
}

// pausedPoll is how often a post-copy source is looked at for a pause.
const pausedPoll = 250 * time.Millisecond

func isClosed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// resolvedByOperator marks an outcome an operator gave (ferryctl resolve).
const resolvedByOperator = "resolved_by_operator"

// settledOutcome is what a finish's answer settles: whether the guest runs
// on the target, or "" when it says nothing for certain. A plain success
// is libvirt's Finish having returned the domain there.
func settledOutcome(resp peer.ControlResponse, err error) string {
	var ce *peer.ControlError
	switch {
	case err == nil && resp.Outcome == "":
		return peer.OutcomeRunning
	case err == nil, errors.As(err, &ce):
		return resp.Outcome
	}
	return ""
}

// targetLost tells a finish that found the target's proxy gone from one
// that failed otherwise: a cut link times out, a reset stream leaves the
// target's proxy there to answer.
func targetLost(ferr error) string {
	var ce *peer.ControlError
	switch {
	case ferr == nil:
		return ""
	case errors.Is(ferr, syscall.ECONNREFUSED):
		return "the finish found nothing listening at its proxy's address (its ferryd is likely down)"
	case errors.As(ferr, &ce) && ce.Reason == peer.ReasonUnknownMigration:
		return "its proxy does not know the migration (its ferryd restarted, or the migration is not bound to this node's identity)"
	case errors.As(ferr, &ce) && ce.Reason == peer.ReasonRestarted:
		return "its ferryd restarted since the prepare, and with it the connection its libvirt held the incoming guest by"
	}
	return ""
}

// tellTargetKept tells the target of a migration an operator settled by
// keeping this node's copy (ferryctl resolve --keep source) to drop its
// own, once it can be reached: the operator decided without its word. A
// target that answers it already ran the guest proves the operator's
// premise wrong: two copies run, and this node's, resumed only on that
// premise, is paused (kept whole, not destroyed) for an operator.
func (s *Source) tellTargetKept(log *zap.Logger, r drivenRecord) {
	for wait, give := 5*time.Second, time.Now().Add(tellTargetFor); time.Now().Before(give); wait = min(2*wait, time.Minute) {
		ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
		resp, err := s.proxy.ControlTo(ctx, r.Target, r.TargetOwner, peer.ControlRequest{Op: peer.OpFinish, Migration: r.TargetID, Domain: r.Domain, Cancelled: true})
		cancel()
		var ce *peer.ControlError
		switch outcome := settledOutcome(resp, err); {
		case errors.As(err, &ce) && ce.Reason == peer.ReasonUnknownMigration:
			// Its record went with its copy: dropped at its prepare's time.
			log.Warn("the target no longer knows the migration the operator settled: nothing of it is left there")
		case outcome == "":
			time.Sleep(wait)
			continue
		case outcome == peer.OutcomeRunning:
			s.pauseSecondCopy(log, r, outcome)
		default:
			// A split the operator settled in pre-copy cannot be: the
			// guest never ran there; nothing here is touched on it.
			log.Warn("the target answered the operator's keep-source", zap.String("outcome", outcome))
		}
		return
	}
	log.Error("the target could not be told that the operator kept this node's copy", zap.Duration("tried", tellTargetFor))
}

// tellTargetFor bounds how long a target is told of an operator's decision.
const tellTargetFor = 24 * time.Hour

// pauseSecondCopy pauses this node's copy of r's guest, which an operator
// resumed though the target's copy is running (outcome) too.
func (s *Source) pauseSecondCopy(log *zap.Logger, r drivenRecord, outcome string) {
	log = log.With(zap.String("targetSays", outcome))
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			time.Sleep(5 * time.Second)
		}
		c, err := s.cfg.Conns.Conn(r.Socket)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
		dom, why, err := recordedDomain(ctx, c, r)
		if err == nil && why == "" {
			err = pauseAndKeepDown(ctx, c, dom)
		}
		cancel()
		switch {
		case why != "":
			log.Error("the operator kept this node's copy, and the target runs the guest too; this node's is gone", zap.String("here", why))
			return
		case err == nil:
			log.Error("the operator kept this node's copy, but the target runs the guest too: two copies ran; this node's is paused, whole, for an operator (destroy the copy that must not run; see docs/operations.md, FerryGuestRunningOnTwoNodes)")
			return
		}
		log.Warn("cannot pause this node's copy, which runs beside the target's", zap.Error(err))
	}
	log.Error("the operator kept this node's copy, the target runs the guest too, and this node's could not be paused: the guest runs on two nodes")
}

// pauseAndKeepDown pauses dom and turns its autostart off, so that neither
// a boot of this node nor a resume on the migration's behalf starts it:
// libvirt's suspend of a copy already paused does nothing, so the state is
// read back until it is paused by a user's word.
func pauseAndKeepDown(ctx context.Context, c *libvirtx.Conn, dom libvirt.Domain) error {
	if err := c.Suspend(ctx, dom); err != nil {
		return err
	}
	st, reason, err := c.DomainState(ctx, dom)
	switch {
	case err != nil:
		return err
	case st != libvirtx.StatePaused || reason != int32(libvirt.DomainPausedUser):
		return fmt.Errorf("the copy is %s (reason %d) after the suspend, not paused by it", st, reason)
	}
	persistent, err := c.Persistent(ctx, dom)
	if err == nil && persistent {
		err = c.SetAutostart(ctx, dom, false)
	}
	if err != nil {
		return fmt.Errorf("paused, but its autostart may still be on: %w", err)
	}
	return nil
}
