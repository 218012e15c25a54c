package drive

import (
	"cmp"
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
)

// The link is not split evenly: two migrations that each get half of it
// may both miss their switch-over window where one at a time would not
// (the reason KubeVirt's HCO went down to one migration per node). The
// one nearest its switch-over gets the link, less a trickle for each of
// the others, which keeps their streams going until their turn.
const (
	trickleShare = 16 // each other migration gets 1/16 of the link
	minSpeedMiBs = 1
	balanceEvery = time.Second
)

// Balance shares the link among the migrations this node drives, every
// second, until ctx ends; a migration starts with the whole link if it is
// alone and a trickle if not. Without a link
// bandwidth it does nothing.
func (s *Source) Balance(ctx context.Context) {
	if s.cfg.LinkBytesPerSecond == 0 {
		return
	}
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.balance(ctx)
	}
}

func (s *Source) linkMiBs() uint64 { return max(s.cfg.LinkBytesPerSecond>>20, minSpeedMiBs) }

func (s *Source) trickle(running int) uint64 {
	if running <= 1 {
		return s.linkMiBs()
	}
	return max(s.linkMiBs()/trickleShare, minSpeedMiBs)
}

// startingShare is the cap a migration starts with: the whole link when
// it is alone, a trickle beside others until balance gives it its turn;
// 0 when the link is not managed.
func (s *Source) startingShare() int {
	if s.cfg.LinkBytesPerSecond == 0 {
		return 0
	}
	return int(s.trickle(s.slots.status().Used))
}

// balance gives the link to the migration nearest its switch-over: one in
// post-copy (its guest runs split until the last page), else the one with
// least memory left among those past their first pass, else the oldest.
func (s *Source) balance(ctx context.Context) {
	owned := s.running.owned()
	if len(owned) == 0 {
		return
	}
	best, bestKey := -1, ""
	var bestJob api.Job
	for i, o := range owned {
		j, err := s.tracker.JobByName(o.owner.socket, o.owner.domain)
		if err != nil {
			continue
		}
		if best < 0 || nearer(j, bestJob) {
			best, bestKey, bestJob = i, o.key, j
		}
	}
	if best < 0 {
		best, bestKey = 0, owned[0].key
	}
	others := uint64(len(owned) - 1)
	lead := uint64(minSpeedMiBs)
	if given := others * s.trickle(len(owned)); given < s.linkMiBs() {
		lead = max(s.linkMiBs()-given, minSpeedMiBs)
	}
	// The one that loses the link first, then the one that gains it: the
	// link is never asked for more than it has.
	slices.SortStableFunc(owned, func(a, b ownedDrive) int {
		return cmp.Compare(boolRank(a.key == bestKey), boolRank(b.key == bestKey))
	})
	for _, o := range owned {
		t := s.trickle(len(owned))
		// Held back only if its own cap would let it go faster.
		want, held := t, len(owned) > 1 && (o.cap == 0 || o.cap > t)
		if o.key == bestKey {
			want, held = lead, false
		}
		if o.cap > 0 {
			want = min(want, o.cap)
		}
		if o.speed == want {
			s.running.setSpeed(o.key, want, held)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := o.owner.SetMaxSpeed(cctx, want)
		cancel()
		if err != nil {
			s.log.Debug("bandwidth share not set", zap.String("domain", o.owner.domain), zap.Error(err))
			continue
		}
		s.running.setSpeed(o.key, want, held)
		if o.key == bestKey {
			s.books.Note(o.owner.socket, o.owner.domain, "scheduler", "given the link: nearest its switch-over of the migrations this node drives")
		}
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nearer says whether migration a is nearer its switch-over than b.
func nearer(a, b api.Job) bool {
	pa, pb := a.Mode == api.ModePostCopy, b.Mode == api.ModePostCopy
	if pa != pb {
		return pa
	}
	fa, fb := a.Iteration >= 2, b.Iteration >= 2
	if fa != fb {
		return fa
	}
	if fa && a.MemoryRemainingBytes != b.MemoryRemainingBytes {
		return a.MemoryRemainingBytes < b.MemoryRemainingBytes
	}
	return a.StartTime.Before(b.StartTime)
}
