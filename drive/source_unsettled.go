package drive

import (
	"context"
	"errors"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// A migration the running ferryd could not settle (its own connection to
// libvirt died with a libvirtd restart; the target has not answered yet)
// is settled by the running ferryd itself, in the background, as a
// restarted one would: nothing waits for the next start, or a guest left
// paused here would stay paused until someone restarted ferryd.

// applyRetryMax caps the wait between two tries of the target's word;
// applyFirstWait is the first.
const applyRetryMax = time.Minute

var applyFirstWait = 5 * time.Second

// applyUntilDone applies the target's word to this node's copy through
// whichever connection to libvirt works at each try, until it takes:
// libvirt may still be ending the job ferryd left (a Perform failing as
// its relay went), or be restarting. A copy running here beside the one
// the target says runs there is left for an operator: the migration is
// shown in doubt, looked at again each minute (an operator may destroy a
// copy), and settled by their word (ferryctl resolve). It returns what
// was done here and the outcome that stands (an operator's may replace
// the target's); ok is false only once ctx ends.
func (s *Source) applyUntilDone(ctx context.Context, log *zap.Logger, r drivenRecord, outcome string) (what, stands string, ok bool) {
	key := driveKey(r.Socket, r.Domain)
	s.running.settled(key)
	wait, left := applyFirstWait, false
	for tries := 1; ; tries++ {
		c, err := s.cfg.Conns.Conn(r.Socket)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			what, err = applyOutcome(actx, c, r, outcome)
			cancel()
		}
		if err == nil {
			return what, outcome, true
		}
		if errors.Is(err, errLeftForOperator) && !left {
			left = true
			log.Error("the target's word cannot be applied to this node's copy: left for an operator (ferryctl resolve, or destroy the copy that must not run)", zap.String("outcome", outcome), zap.Error(err))
			s.books.DriveInDoubt(r.Socket, r.Domain, err.Error())
			s.running.doubt(key)
		} else if !left && tries%12 == 0 {
			log.Error("cannot apply the target's word to this node's copy yet; trying again", zap.String("outcome", outcome), zap.Int("tries", tries), zap.Error(err))
		}
		// An operator's word is taken only while both copies run: any
		// other failure is libvirt's, and passes.
		var decisions <-chan string
		if left {
			wait, decisions = applyRetryMax, s.running.decisions(key)
		}
		select {
		case <-ctx.Done():
			return "", outcome, false
		case word := <-decisions:
			return s.applyOperatorsWord(ctx, log, r, word)
		case <-time.After(wait):
		}
		if tries >= 12 {
			wait = min(2*wait, applyRetryMax)
		}
	}
}

// applyOperatorsWord settles a copy running beside the target's as an
// operator said: keep this node's (the target's is theirs to end), or
// keep the target's, which destroys this one.
func (s *Source) applyOperatorsWord(ctx context.Context, log *zap.Logger, r drivenRecord, word string) (string, string, bool) {
	log.Warn("the migration was settled by an operator", zap.String("outcome", word))
	if word != peer.OutcomeRunning {
		return "this node's copy runs on, as the operator decided", peer.OutcomeStopped, true
	}
	for {
		c, err := s.cfg.Conns.Conn(r.Socket)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			var dom libvirt.Domain
			var absent string
			if dom, absent, err = recordedDomain(actx, c, r); err == nil && absent == "" {
				err = c.Destroy(actx, dom)
				if libvirtx.IsNoDomain(err) {
					err = nil
				}
			}
			cancel()
			if err == nil {
				return "this node's copy was destroyed, as the operator decided", peer.OutcomeRunning, true
			}
		}
		log.Warn("cannot destroy this node's copy as the operator decided; trying again", zap.Error(err))
		select {
		case <-ctx.Done():
			return "", peer.OutcomeRunning, false
		case <-time.After(5 * time.Second):
		}
	}
}

// settleUnsettled settles a migration whose drive ended with its record
// kept; the caller holds its key.
func (s *Source) settleUnsettled(id string) {
	r, ok := s.recordedDrive(id)
	if !ok || r.GivenUp {
		return
	}
	s.settleAfterRestart(context.Background(), r, "the migration's drive ended unsettled")
}

// recordedDrive is the record of one migration, if kept.
func (s *Source) recordedDrive(id string) (drivenRecord, bool) {
	for _, r := range s.recordedDrives() {
		if r.ID == id {
			return r, true
		}
	}
	return drivenRecord{}, false
}
