package drive

import (
	"context"
	"slices"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"
)

// givenUpSweepEvery is how often the running ferryd looks at its
// given-up records: a record left for a guest gone since only costs a
// file, so once a minute is plenty.
const givenUpSweepEvery = time.Minute

// sweepGivenUp forgets, while ferryd runs, each given-up record whose
// guest is no longer held here in post-copy: its socket missing for
// socketGoneFor (a pod deleted with its guest), or libvirt holding no
// such copy any more (the operator destroyed or ran it). What a start of
// ferryd decides (keepGivenUp) is decided again each givenUpSweepEvery,
// so such a record does not wait for a restart. Until ctx ends.
func (s *Source) sweepGivenUp(ctx context.Context) {
	missing := map[string]time.Time{} // record ID: its socket missing since
	t := time.NewTicker(givenUpSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.sweepGivenUpOnce(ctx, missing, time.Now())
	}
}

func (s *Source) sweepGivenUpOnce(ctx context.Context, missing map[string]time.Time, now time.Time) {
	seen := map[string]bool{}
	for _, r := range s.recordedDrives() {
		if !r.GivenUp {
			continue
		}
		seen[r.ID] = true
		// A recovery started again, or a start of ferryd still deciding,
		// holds the key: that one is theirs.
		key := driveKey(r.Socket, r.Domain)
		if !s.running.start(key) {
			continue
		}
		// Read again under the key: a recovery started again may have
		// ended, and settled and forgotten its record, since the listing.
		if cur, ok := s.recordedDrive(r.ID); ok && cur.GivenUp {
			s.sweepGivenUpRecord(ctx, cur, missing, now)
		}
		s.running.end(key)
	}
	for id := range missing {
		if !seen[id] {
			delete(missing, id)
		}
	}
}

func (s *Source) sweepGivenUpRecord(ctx context.Context, r drivenRecord, missing map[string]time.Time, now time.Time) {
	log := s.log.With(zap.String("domain", r.Domain), zap.String("migration", r.ID))
	c, err := s.cfg.Conns.Conn(r.Socket)
	if err != nil {
		if socketThere(r.Socket) || slices.Contains(s.cfg.NodeSockets, r.Socket) {
			delete(missing, r.ID)
			return
		}
		since, ok := missing[r.ID]
		if !ok {
			missing[r.ID] = now
			return
		}
		if now.Sub(since) >= socketGoneFor {
			log.Warn("forgetting a given-up post-copy recovery: its libvirt's socket is gone", zap.String("socket", r.Socket), zap.Duration("for", now.Sub(since)))
			s.forgetDrive(r.ID)
			delete(missing, r.ID)
		}
		return
	}
	delete(missing, r.ID)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, held, known := heldInPostCopy(cctx, c, r); known && !held {
		s.forgetReleased(ctx, log, r)
	}
}

// forgetReleased forgets the record of a guest no longer held here once
// its definition is settled, trying that once: a failure leaves the
// record to the next sweep, which asks again whether the guest is held,
// rather than to a retrier of its own each sweep.
func (s *Source) forgetReleased(ctx context.Context, log *zap.Logger, r drivenRecord) {
	if r.Flags&uint32(libvirt.MigratePersistDest) != 0 {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		what, err := s.settleDefinitionOnce(dctx, r, false)
		cancel()
		if err != nil {
			log.Warn("a post-copy whose recovery an operator gave up is no longer held here, and its definition is not settled yet; the next sweep tries again", zap.Error(err))
			return
		}
		log.Info("the guest's definition here is settled", zap.String("here", what))
	}
	log.Info("a post-copy whose recovery an operator gave up is no longer held here: its record goes")
	s.forgetDrive(r.ID)
}
