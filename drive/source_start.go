package drive

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration/policy"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// Source.start's steps: the plan before libvirt is asked anything, the
// start up to Begin (starting, which is undone if Perform is not reached),
// and the steps between that need no undoing of their own.

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
	ask peer.ControlRequest) (peer.ControlResponse, error) {
	// A target node named by the caller is checked on the certificate
	// before the domain's XML is sent anywhere.
	want := ""
	if req.TargetNode != "" {
		want = proxy.NodeOwner(req.TargetNode)
	}
	prep, err := s.proxy.ControlTo(ctx, req.Target, want, ask)
	if ask.LibvirtResume && olderPeer(err, "libvirtResume") {
		// A ferryd from before libvirt's own resume refuses the field it
		// does not know; without it, it gives the target QEMU its monitor.
		ask.LibvirtResume = false
		prep, err = s.proxy.ControlTo(ctx, req.Target, want, ask)
	}
	var busy *peer.ControlError
	if errors.As(err, &busy) && busy.Reason == peer.ReasonInboundBusy {
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
		s.books.PrepareFailed(req.Domain, dom, socket, begun,
			api.ProxyInfo{MigrationID: id, Target: req.Target, TLS: s.proxy.TLS(), Parallel: req.Parallel}, err.Error())
		return prep, err
	}
	// The target's id, not ours, names the streams and the finish: the
	// target chose it, and only the two nodes know it.
	if peer.ValidID(prep.Migration) != nil {
		return prep, fmt.Errorf("the target answered the prepare with no valid migration id %q", prep.Migration)
	}
	return prep, nil
}

// olderPeer says a peer refused a request for a field of it it does not
// know: a ferryd older than the field, which reads requests strictly.
func olderPeer(err error, field string) bool {
	var ce *peer.ControlError
	return errors.As(err, &ce) && ce.Reason == "malformed_request" && strings.Contains(ce.Msg, `unknown field "`+field+`"`)
}

// openStreams opens this node's end of the migration's streams, bound to
// the node that prepared it; for the direct path it checks the target's
// URI (in prep) instead of opening a socket for QEMU. The caller cancels
// the target's prepare on an error.
func (s *Source) openStreams(req MigrateRequest, conn *libvirtx.Conn, prep *peer.ControlResponse) (*proxy.SourceMigration, error) {
	kinds := []peer.Kind{peer.KindMemory}
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

// startPlan is what a migration request comes to before anything is asked
// of libvirt for it: the request with its policy applied, the domain, its
// deadline and its reservation here.
type startPlan struct {
	req      MigrateRequest
	pol      policy.Settings
	conn     *libvirtx.Conn // the pool's connection to the domain's libvirt
	dom      libvirt.Domain
	deadline time.Duration
	capMiBs  uint64 // the request's own cap, which bounds every share it is given
	drive    string // the reservation
	dataWhy  string
}

func (s *Source) planStart(ctx context.Context, req MigrateRequest) (startPlan, error) {
	req, pol, err := s.effective(req)
	if err != nil {
		return startPlan{}, err
	}
	socket, dom, err := s.tracker.DomainRef(req.Socket, req.Domain)
	if err != nil {
		return startPlan{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	conn, err := s.cfg.Conns.Conn(socket)
	if err != nil {
		return startPlan{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if err := directFromPod(conn, req); err != nil {
		return startPlan{}, err
	}
	deadline, err := s.deadlineOf(ctx, conn, dom, req)
	if err != nil {
		return startPlan{}, err
	}
	p := startPlan{pol: pol, conn: conn, dom: dom, deadline: deadline, capMiBs: uint64(req.BandwidthMiBs)}
	if p.drive, err = s.reserve(ctx, conn, req.Domain); err != nil {
		return startPlan{}, err
	}
	if req.BandwidthMiBs == 0 {
		req.BandwidthMiBs = s.startingShare()
	}
	if req.Compression == CompressionAuto {
		c := s.chooseFor(ctx, conn.Socket(), req)
		if c.Compression == CompressionZstd {
			req.Parallel = max(req.Parallel, c.Parallel)
		}
		req.Compression, p.dataWhy = c.Compression, c.Why
		s.log.Info("data settings chosen", zap.String("domain", req.Domain), zap.String("why", c.Why))
	}
	p.req = req
	return p, nil
}

// starting is a migration between its reservation and Perform: what is
// undone if it does not get that far.
type starting struct {
	s      *Source
	drive  string
	domain string
	dom    libvirt.Domain

	id          string
	begun       time.Time
	own         *libvirtx.Conn // the migration's own connection
	flags       libvirt.DomainMigrateFlags
	params      []libvirt.TypedParam
	config      string // the persistent definition, for a persistent guest
	autostart   bool
	held        bool // autostart is held off
	inJob       bool // libvirt's Begin started its migration job
	speedBefore uint64
	performing  bool // handed to the drive: nothing here is undone
}

// begin opens the migration's own libvirt connection, holds autostart off
// and runs libvirt's Begin: the domain's XML for the target and Begin's
// cookie.
func (st *starting) begin(ctx context.Context, conn *libvirtx.Conn, req MigrateRequest) (string, []byte, error) {
	// The protocol's steps run on a libvirt connection of the migration's
	// own, for as long as it lasts: libvirt ties a migration's state to
	// the connection that runs it, and the pool's connection is cut on one
	// missed ping, which would end the migration with it.
	own, err := conn.Another(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("opening the migration's own libvirt connection: %w", err)
	}
	st.own, st.id, st.begun = own, newMigrationID(), time.Now()
	st.flags, st.params = migrateFlags(req)
	persistent, err := own.Persistent(ctx, st.dom)
	if err != nil {
		return "", nil, fmt.Errorf("asking libvirt whether %s is persistent: %w", req.Domain, err)
	}
	if persistent {
		// The definition goes with the guest, checked by the target and
		// saved there before the guest starts there; only then is the one
		// here removed (see definition.go).
		st.flags |= libvirt.MigratePersistDest
		if st.config, st.autostart, err = persistentConfig(ctx, own, st.dom); err != nil {
			return "", nil, err
		}
	}
	// Before Begin: libvirt changes autostart under a job of the domain's,
	// which a migration's job holds off until it ends.
	if err := holdAutostart(ctx, own, st.dom, st.autostart); err != nil {
		return "", nil, err
	}
	st.held = true
	// What libvirt caps this domain's migrations at now, which the
	// scheduler's shares replace while this one runs.
	if st.speedBefore, err = own.MaxSpeed(ctx, st.dom); err != nil {
		st.speedBefore = 0 // unknown: nothing is given back
	}
	domXML, cookie, err := own.Begin(ctx, st.dom, st.params, st.flags)
	if err != nil {
		return "", nil, fmt.Errorf("libvirt's Begin on this node: %w", err)
	}
	// Begin started libvirt's job (CHANGE_PROTECTION): until Perform takes
	// it over, a failure ends it with a cancelled Confirm, as libvirt's own
	// client does.
	st.inJob = true
	// A guest that came here by a Ferry post-copy carries the monitor its
	// target gave it; the next target gives its own.
	if domXML, err = libvirtx.WithoutRecoveryMonitor(domXML); err != nil {
		return "", nil, fmt.Errorf("reading libvirt's Begin XML: %w", err)
	}
	if faults.Inject(faults.PauseAfterBegin) {
		st.s.log.Warn("fault injected: pausing between Begin and Prepare", zap.String("domain", req.Domain), zap.Duration("for", pauseAfterBegin))
		time.Sleep(pauseAfterBegin)
	}
	return domXML, cookie, nil
}

// cancelUnlessPerforming gives the reservation back and ends libvirt's
// migration job with a cancelled Confirm, as libvirt's own client does.
func (st *starting) cancelUnlessPerforming() {
	if st.performing {
		return
	}
	st.s.running.end(st.drive)
	if st.inJob {
		if err := st.own.Confirm(context.Background(), st.dom, st.params, nil, st.flags, true, confirmTimeout); err != nil {
			st.s.log.Warn("ending libvirt's migration job after a failed start", zap.String("domain", st.domain), zap.Error(err))
		}
	}
}

func (st *starting) giveBackUnlessPerforming() {
	if st.performing {
		return
	}
	if st.held {
		giveAutostartBack(st.s.log, st.own, st.dom, st.autostart, st.domain)
	}
	if st.own != nil {
		st.own.Close()
	}
}
