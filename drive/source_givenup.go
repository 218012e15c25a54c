package drive

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
)

// A recovery an operator gave up leaves the guest held in post-copy on
// both nodes: declared lost, but not gone. Its record stays, marked given
// up, for as long as the guest is held here, so that ferryctl recover can
// start the attempts again (a node thought gone for good comes back);
// nothing restarts them by itself, not even a restarted ferryd.

// keepForRecover marks r given up and keeps it.
func (s *Source) keepForRecover(log *zap.Logger, r drivenRecord) {
	r.GivenUp = true
	if err := s.recordDrive(r); err != nil {
		log.Error("cannot keep the record of a given-up post-copy recovery; ferryctl recover cannot start it again", zap.Error(err))
	}
}

// keepGivenUp keeps a given-up record at a start of ferryd while its
// guest is held in post-copy here, and settles it once libvirt says it is
// not (the operator destroyed the copies meanwhile); sweepGivenUp looks
// again while ferryd runs.
func (s *Source) keepGivenUp(ctx context.Context, r drivenRecord) {
	log := s.log.With(zap.String("domain", r.Domain), zap.String("migration", r.ID))
	c, gone := s.waitConnWhileThere(ctx, r.Socket, socketGoneFor)
	if gone {
		// A pod's libvirt, deleted with its pod: the guest went with it.
		log.Warn("forgetting a given-up post-copy recovery: its libvirt's socket is gone", zap.String("socket", r.Socket), zap.Duration("for", socketGoneFor))
		s.forgetDrive(r.ID)
		return
	}
	if c == nil {
		return
	}
	_, held, known := heldInPostCopy(ctx, c, r)
	switch {
	case held:
		log.Warn("a post-copy whose recovery an operator gave up is still held here: ferryctl recover starts it again")
	case known:
		s.forgetSettled(log, r, false)
	default:
		// Asked again by the sweep: a failed call says nothing of the guest.
		log.Warn("cannot tell whether a post-copy whose recovery an operator gave up is still held here; its record stays")
	}
}

// heldInPostCopy is r's guest and whether libvirt holds it here in
// post-copy; known is false when libvirt could not be asked (a call that
// failed says nothing of the guest).
func heldInPostCopy(ctx context.Context, c *libvirtx.Conn, r drivenRecord) (dom libvirt.Domain, held, known bool) {
	dom, err := c.LookupDomain(ctx, r.Domain)
	switch {
	case libvirtx.IsNoDomain(err):
		return dom, false, true
	case err != nil:
		return dom, false, false
	case libvirtx.UUIDString(dom.UUID) != r.UUID:
		return dom, false, true
	}
	state, reason, err := c.DomainState(ctx, dom)
	if libvirtx.IsNoDomain(err) {
		return dom, false, true
	}
	if err != nil {
		return dom, false, false
	}
	return dom, libvirtx.InPostCopy(state, reason), true
}

// rearm starts again the recovery an operator gave up of domain's
// post-copy (on socket, if named); false when there is none to start, or
// its guest is no longer held here.
func (s *Source) rearm(socket, domain string) bool {
	if s.proxy == nil {
		return false
	}
	// Only a record whose guest is still held counts: one left by a
	// guest destroyed since (its pod gone) must not make the name
	// ambiguous.
	var r drivenRecord
	var dom libvirt.Domain
	found := 0
	for _, rec := range s.recordedDrives() {
		if !rec.GivenUp || rec.Domain != domain || socket != "" && rec.Socket != socket || !s.recovers(rec) {
			continue
		}
		c, err := s.cfg.Conns.Conn(rec.Socket)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, held, _ := heldInPostCopy(ctx, c, rec)
		cancel()
		if held {
			r, dom, found = rec, d, found+1
		}
	}
	if found != 1 {
		return false
	}
	c, err := s.cfg.Conns.Conn(r.Socket)
	if err != nil {
		return false
	}
	key := driveKey(r.Socket, r.Domain)
	if !s.running.start(key) {
		return false
	}
	log := s.log.With(zap.String("domain", r.Domain), zap.String("migration", r.ID), zap.String("target", r.Target))
	r.GivenUp = false
	if err := s.recordDrive(r); err != nil {
		s.running.end(key)
		log.Error("cannot record a post-copy recovery started again", zap.Error(err))
		return false
	}
	info := r.info(s.proxy.TLS())
	s.books.Drive(r.Socket, r.Domain, info)
	s.books.DriveRecoverable(r.Socket, r.Domain, s.cfg.PostCopyRecoveryTimeout)
	s.books.DriveRearmed(r.Socket, dom)
	go func() {
		defer s.running.end(key)
		defer s.books.Undrive(r.Socket, r.Domain)
		s.recoverAfterRestart(log, r, c, dom, info, "an operator started a given-up post-copy recovery again")
	}()
	return true
}

// socketGoneFor is how long a libvirt socket must be missing before what
// Ferry kept for a guest behind it goes: longer than libvirtd's restart.
const socketGoneFor = 10 * time.Minute

// waitConnWhileThere waits for this node's connection to socket, checking
// each second, until ctx ends; with gone set, also until the socket's file
// has stayed missing that long: then it says so.
func (s *Source) waitConnWhileThere(ctx context.Context, socket string, gone time.Duration) (*libvirtx.Conn, bool) {
	var missing time.Time
	for {
		if c, err := s.cfg.Conns.Conn(socket); err == nil {
			return c, false
		}
		switch {
		case gone <= 0: // waited for however long it is missing
		case socketThere(socket) || slices.Contains(s.cfg.NodeSockets, socket):
			missing = time.Time{}
		case missing.IsZero():
			missing = time.Now()
		case time.Since(missing) >= gone:
			return nil, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(time.Second):
		}
	}
}

// socketThere says whether socket's file may exist (only "no such file"
// says it does not).
func socketThere(socket string) bool {
	_, err := os.Stat(socket)
	return !errors.Is(err, fs.ErrNotExist)
}
