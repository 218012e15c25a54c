package drive

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
)

// A migration the running ferryd could not settle (its own connection to
// libvirt died with a libvirtd restart; the target has not answered yet)
// is settled by the running ferryd itself, in the background, as a
// restarted one would: nothing waits for the next start, or a guest left
// paused here would stay paused until someone restarted ferryd.

// applyRetryMax caps the wait between two tries of the target's word.
const applyRetryMax = time.Minute

// applyUntilDone applies the target's word to this node's copy through
// whichever connection to libvirt works at each try, until it takes:
// libvirt may still be ending the job ferryd left (a Perform failing as
// its relay went), or be restarting. False only once ctx ends.
func (s *Source) applyUntilDone(ctx context.Context, log *zap.Logger, r drivenRecord, outcome string) (string, bool) {
	wait := 5 * time.Second
	for tries := 1; ; tries++ {
		c, err := s.cfg.Conns.Conn(r.Socket)
		what := ""
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			what, err = applyOutcome(actx, c, r, outcome)
			cancel()
		}
		if err == nil {
			return what, true
		}
		if errors.Is(err, errLeftForOperator) {
			log.Error("the target's word cannot be applied to this node's copy: left for an operator; the record stays", zap.String("outcome", outcome), zap.Error(err))
			return "", false
		}
		if tries%12 == 0 {
			log.Error("cannot apply the target's word to this node's copy yet; trying again", zap.String("outcome", outcome), zap.Int("tries", tries), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-time.After(wait):
		}
		if tries >= 12 {
			wait = min(2*wait, applyRetryMax)
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
