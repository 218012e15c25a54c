package drive

import (
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/proxy"
)

// The steps of Source.start that need no undoing of their own: each
// returns what the next needs, and start undoes what came before.

// deadlineOf is how long the migration of dom may run, from its memory.
func (s *Source) deadlineOf(ctx context.Context, conn *libvirtx.Conn, dom libvirt.Domain, req MigrateRequest) (time.Duration, error) {
	mem, err := conn.MemoryBytes(ctx, dom)
	if err != nil {
		return 0, fmt.Errorf("reading the guest's memory size, which sets the migration's deadline: %w", err)
	}
	// A migration the scheduler may hold at a trickle while another has
	// the link is not aborted for that: its deadline counts passes at the
	// trickle.
	if t := int(s.trickle(s.slots.max)); s.cfg.LinkBytesPerSecond > 0 && (req.BandwidthMiBs == 0 || req.BandwidthMiBs > t) {
		req.BandwidthMiBs = t
	}
	return deadlineFor(req, mem), nil
}

// reserve takes the domain for this migration and an outbound slot,
// waiting its turn for the slot; the key it returns is the caller's to
// end (s.running.end) once the migration is over or has failed to start.
func (s *Source) reserve(ctx context.Context, conn *libvirtx.Conn, domain string) (string, error) {
	// Keyed by socket too: a pod's domain of the same name must not
	// block this one's migration.
	drive := driveKey(conn.Socket(), domain)
	if s.tracker.InFlight(conn.Socket(), domain) {
		return "", fmt.Errorf("%w: %s is already migrating", ErrConflict, domain)
	}
	if !s.running.start(drive) {
		return "", fmt.Errorf("%w: Ferry is already driving a migration of %s", ErrConflict, domain)
	}
	freeSlot, err := s.slots.acquire(ctx, func(ahead int) {
		queueNotice(ctx, fmt.Sprintf("waiting for one of this node's %d outbound migration slots: %d ahead", s.slots.max, ahead))
		s.log.Info("migration waits for an outbound slot", zap.String("domain", domain), zap.Int("ahead", ahead))
	})
	if err != nil {
		s.running.end(drive)
		return "", err
	}
	s.running.hold(drive, freeSlot)
	if s.cfg.Quiet != nil {
		// No dirty-rate measurement beside the migration: it would slow
		// it, and read its copying as the guest's writing.
		s.running.hold(drive, s.cfg.Quiet(ctx, conn.Socket(), domain))
	}
	return drive, nil
}

// prepareOnTarget asks the target to prepare the migration. A failure is
// recorded as the migration's job here (no libvirt job ever started, so
// nothing else would), but for a busy target, which the caller asks again.
func (s *Source) prepareOnTarget(ctx context.Context, req MigrateRequest, socket string, dom libvirt.Domain, id string, begun time.Time,
	ask proxy.ControlRequest) (proxy.ControlResponse, error) {
	// A target node named by the caller is checked on the certificate
	// before the domain's XML is sent anywhere.
	want := ""
	if req.TargetNode != "" {
		want = proxy.NodeOwner(req.TargetNode)
	}
	prep, err := s.proxy.ControlTo(ctx, req.Target, want, ask)
	var busy *proxy.ControlError
	if errors.As(err, &busy) && busy.Reason == proxy.ReasonInboundBusy {
		// Not a failure: the caller asks again.
		return prep, fmt.Errorf("preparing the migration on the target: %w", err)
	}
	if err != nil {
		var wp *proxy.WrongPeerError
		if errors.As(err, &wp) {
			err = fmt.Errorf("target proxy %s is %s, not node %s, which the migration asked for", wp.Addr, wp.Got, req.TargetNode)
		}
		err = fmt.Errorf("preparing the migration on the target: %w", err)
		// A failed job keeps the failure, its class and its count.
		s.tracker.PrepareFailed(req.Domain, dom, socket, begun,
			api.ProxyInfo{MigrationID: id, Target: req.Target, TLS: s.proxy.TLS(), Parallel: req.Parallel}, err.Error())
		return prep, err
	}
	// The target's id, not ours, names the streams and the finish: the
	// target chose it, and only the two nodes know it.
	if proxy.ValidID(prep.Migration) != nil {
		return prep, fmt.Errorf("the target answered the prepare with no valid migration id %q", prep.Migration)
	}
	return prep, nil
}

// openStreams opens this node's end of the migration's streams, bound to
// the node that prepared it; for the direct path it checks the target's
// URI (in prep) instead of opening a socket for QEMU. The caller cancels
// the target's prepare on an error.
func (s *Source) openStreams(req MigrateRequest, conn *libvirtx.Conn, prep *proxy.ControlResponse) (*proxy.SourceMigration, error) {
	kinds := []proxy.Kind{proxy.KindMemory}
	if req.DataPath == DataPathDirect {
		// QEMU's stream goes straight to the target's QEMU: no socket
		// here, but the same books (the target bound, the close).
		kinds = nil
		uri, err := directURI(prep.URI, req.Target)
		if err != nil {
			return nil, err
		}
		prep.URI = uri
	}
	qemu, err := sourceQEMU(conn.Socket(), req.Domain, kinds)
	if err != nil {
		return nil, err
	}
	src, err := s.proxy.OpenSource(prep.Migration, req.Target, kinds, qemu, daemonPID(conn))
	if err != nil {
		return nil, err
	}
	// The streams go to the node that prepared the migration, nowhere
	// else the target's address might lead meanwhile.
	src.BindTarget(prep.Owner)
	return src, nil
}
