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
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration/policy"
	"github.com/ferry-vm/ferry/peer"
)

// Bounds of the protocol steps around Perform, which has none of its own
// (its owner acts at the deadline). The target's Finish has none either:
// in post-copy it lasts until the last page, and only its answer may
// decide the source's copy.
const (
	confirmTimeout = 2 * time.Minute
	cancelTimeout  = 30 * time.Second
	// finishWait and postCopyFinishWait bound one attempt of the
	// target's finish (see settleFinish).
	finishWait         = 2 * time.Minute
	postCopyFinishWait = 30 * 24 * time.Hour
	// postCopyGrace is how long past the deadline a migration that may
	// switch to post-copy is given for the switch before it is aborted.
	postCopyGrace = 30 * time.Second
	// pauseAfterBegin is how long the PauseAfterBegin fault holds a
	// migration between Begin and Prepare.
	pauseAfterBegin = 3 * time.Second
	// pauseBeforePerform is how long the PauseBeforePerform fault holds
	// a prepared migration before Perform.
	pauseBeforePerform = 8 * time.Second
	// pauseBeforeFinish is how long the PauseBeforeFinish fault holds a
	// performed migration before its finish.
	pauseBeforeFinish = 8 * time.Second
	// inDoubtAfter is how long the source asks for the finish's outcome
	// before its job shows InDoubt; it goes on asking after.
	inDoubtAfter = 30 * time.Second
)

// inboundRetry is how often a migration the target has no inbound slot
// for asks again.
const inboundRetry = 2 * time.Second

// Start runs libvirt's Begin here, has the target prepare the
// migration on its own libvirt, and opens the source sockets; it returns
// once the target is ready, and the migration goes on in the background.
// A target with all its inbound slots taken is asked again, from Begin,
// until ctx ends.
func (s *Source) Start(ctx context.Context, req MigrateRequest) (MigrateResponse, error) {
	for noted := false; ; noted = true {
		resp, err := s.start(ctx, req)
		var ce *peer.ControlError
		if !errors.As(err, &ce) || ce.Reason != peer.ReasonInboundBusy {
			return resp, err
		}
		if !noted {
			s.log.Info("migration waits for an inbound slot on the target", zap.String("domain", req.Domain), zap.String("target", req.Target))
			queueNotice(ctx, fmt.Sprintf("waiting for an inbound migration slot on the target %s: asking again every %s", req.Target, inboundRetry))
		}
		select {
		case <-ctx.Done():
			return resp, err
		case <-time.After(inboundRetry):
		}
	}
}

// effective is the request as it will run: checked, and with what the
// node's policy adds at the start. A dry run asks the same of the target.
func (s *Source) effective(req MigrateRequest) (MigrateRequest, policy.Settings, error) {
	if err := validateMigrate(req); err != nil {
		return req, policy.Settings{}, err
	}
	if err := s.targetAllowed(req); err != nil {
		return req, policy.Settings{}, err
	}
	pol, err := migrationPolicy(s.cfg.Policy, req)
	if err != nil {
		return req, policy.Settings{}, err
	}
	// A policy that may switch to post-copy needs the migration started
	// with it, as KubeVirt starts migrations its policy allows post-copy for.
	if pol.Mode == policy.Act && pol.AllowPostCopy {
		req.PostCopy = true
	}
	// The start-time settings of a MigrationPolicy: QEMU's own throttling,
	// and a bandwidth cap unless the request names one.
	if pol.AllowAutoConverge {
		req.AutoConverge = true
	}
	if req.BandwidthMiBs == 0 && pol.BandwidthPerMigrationMiBs > 0 {
		req.BandwidthMiBs = int(min(pol.BandwidthPerMigrationMiBs, 1<<20))
	}
	if why := multifdWithPostCopy(req.Parallel > 0 || req.Compression == CompressionZstd, req.PostCopy || req.PostCopyAfterSeconds > 0); why != "" {
		// The policy may be what asked for post-copy.
		return req, pol, fmt.Errorf("%w: %s", ErrBadRequest, why)
	}
	if req.DataPath == DataPathDirect && req.PostCopy {
		return req, pol, fmt.Errorf("%w: the direct path cannot be had with post-copy, which this node's policy allows: resuming a broken post-copy needs the proxy's streams", ErrBadRequest)
	}
	if err := s.directAllowed(req); err != nil {
		return req, pol, err
	}
	return req, pol, nil
}

func (s *Source) start(ctx context.Context, req MigrateRequest) (MigrateResponse, error) {
	p, err := s.planStart(ctx, req)
	if err != nil {
		return MigrateResponse{}, err
	}
	req = p.req
	st := &starting{s: s, drive: p.drive, domain: req.Domain, dom: p.dom}
	// Undone in this order when the migration does not start: libvirt's
	// job cancelled, the trial ended, autostart given back, the
	// connection closed.
	defer st.giveBackUnlessPerforming()
	// Between Begin and Perform libvirt holds a migration job that may yet
	// be cancelled (a target with no inbound slot free, asked again): it
	// is not taken for the migration until Perform starts.
	defer s.trials.Hold(p.conn.Socket(), req.Domain)()
	defer st.cancelUnlessPerforming()
	domXML, cookie, err := st.begin(ctx, p.conn, req)
	if err != nil {
		return MigrateResponse{}, err
	}
	id, own, flags := st.id, st.own, st.flags
	ask := peer.ControlRequest{Op: peer.OpPrepare, Migration: id, Domain: req.Domain,
		XML: domXML, Config: st.config, Cookie: cookie, Flags: uint32(flags), Parallel: req.Parallel, PostCopy: flags&libvirt.MigratePostcopy != 0,
		DeadlineSeconds: (p.deadline + postCopyGrace).Seconds(), RecoverSeconds: s.cfg.PostCopyRecoveryTimeout.Seconds(),
		Direct: req.DataPath == DataPathDirect}
	ask.LibvirtResume = s.resumesByLibvirt(ctx, p.conn, ask)
	prep, err := s.prepareOnTarget(ctx, req, p.conn.Socket(), p.dom, id, st.begun, ask)
	if err != nil {
		return MigrateResponse{}, err
	}
	tid := prep.Migration
	src, err := s.openStreams(req, p.conn, &prep)
	if err != nil {
		s.cancelTarget(req, tid, prep.Owner, err)
		return MigrateResponse{}, err
	}
	info := api.ProxyInfo{MigrationID: id, Target: req.Target, TargetNode: prep.PeerNode, TLS: s.proxy.TLS(), Parallel: req.Parallel,
		CapMiBs: req.BandwidthMiBs, DataChoice: p.dataWhy}
	if req.Compression == CompressionZstd {
		info.Compression = CompressionZstd
	}
	if req.DataPath == DataPathDirect {
		info.DataPath, info.DirectURI = DataPathDirect, prep.URI
	}
	params := append(st.params, s.switchoverParam(ctx, own, req, &info)...)
	rec := drivenRecord{ID: id, TargetID: tid, MaxSpeedMiBs: st.speedBefore, Domain: req.Domain, UUID: libvirtx.UUIDString(p.dom.UUID), Socket: own.Socket(), Target: req.Target, TargetOwner: src.Owner(),
		TargetNode: prep.PeerNode, Flags: uint32(flags), Started: st.begun, Autostart: st.autostart}
	if err := s.recordDrive(rec); err != nil {
		s.cancelTarget(req, tid, prep.Owner, err)
		src.Close("not started")
		return MigrateResponse{}, fmt.Errorf("recording the migration in the state directory, which a restart would need: %w", err)
	}
	st.performing = true
	// The owner is in place before the tracker can see the job, so that
	// nothing acts on it but through the owner.
	postCopy := flags&libvirt.MigratePostcopy != 0
	o := newOwner(own.Socket(), req.Domain, p.dom, own, ownerRecord{s.acts, s.books}, postCopy, s.log.With(zap.String("domain", req.Domain), zap.String("migration", id)))
	s.trials.End(p.conn.Socket(), req.Domain)
	s.running.own(p.drive, id, o, Driven{Settings: p.pol, PostCopy: postCopy, Deadline: p.deadline, Act: o.Policy(), CapMiBs: p.capMiBs})
	s.books.Drive(p.conn.Socket(), req.Domain, info)
	if postCopy {
		s.books.DriveRecoverable(p.conn.Socket(), req.Domain, s.cfg.PostCopyRecoveryTimeout)
	}
	d := &driving{s: s, req: req, rec: rec, conn: own, dom: p.dom, src: src, info: info, o: o, flags: flags, params: params,
		log: s.log.With(zap.String("domain", req.Domain), zap.String("migration", id), zap.String("target", req.Target), zap.String("targetNode", info.TargetNode))}
	go s.runDrive(d, p.drive, prep.Cookie, p.deadline)
	return MigrateResponse{MigrationID: id, Domain: req.Domain, Target: req.Target, TLS: s.proxy.TLS(), TargetNode: prep.PeerNode,
		Message: s.startedMessage(prep.PeerNode, info.DirectURI)}, nil
}

// runDrive runs a started migration to its end and does what its end says
// of its record.
func (s *Source) runDrive(d *driving, drive string, cookie []byte, deadline time.Duration) {
	defer s.running.end(drive)
	defer d.conn.Close()
	switch d.run(cookie, deadline) {
	case driveSettled:
		s.forgetDrive(d.rec.ID)
	case driveUnsettled:
		// Settled from its record, as a restarted ferryd would, with the
		// domain still held, so no other migration of it starts meanwhile;
		// its slot goes to others.
		s.running.releaseHolds(drive)
		s.settleUnsettled(d.rec.ID)
	}
}

func (s *Source) startedMessage(peerNode, directURI string) string {
	if directURI != "" {
		return fmt.Sprintf("migration started straight to node %s's QEMU at %s, under QEMU's own TLS", peerNode, directURI)
	}
	msg := "migration started through the Ferry proxy"
	if peerNode != "" {
		msg += " to node " + peerNode
	}
	if !s.proxy.TLS() {
		msg += " (plain TCP: trusted migration network only)"
	}
	return msg
}

// restoreSpeed gives a guest that stays here, the migration over, the
// migration speed it had before the scheduler shared the link: libvirt
// keeps a speed set during a migration for the domain's next one, which
// the scheduler's trickle must not cap. It waits for the owner to stop,
// so that no share asked of it lands after.
func (s *Source) restoreSpeed(log *zap.Logger, conn *libvirtx.Conn, dom libvirt.Domain, rec drivenRecord, o *Owner, key string) {
	if rec.MaxSpeedMiBs == 0 || !s.running.shared(key) {
		return
	}
	<-o.ended
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if active, err := conn.ActiveDomain(ctx, rec.Domain); err != nil || !active {
		return // gone from here: migrated, or no telling
	}
	if err := conn.SetMaxSpeed(ctx, dom, rec.MaxSpeedMiBs); err != nil {
		log.Warn("giving the guest back its migration speed", zap.Uint64("mibs", rec.MaxSpeedMiBs), zap.Error(err))
	}
}

// targetAllowed refuses a target that is not named by its node where
// nodes can be told apart.
func (s *Source) targetAllowed(req MigrateRequest) error {
	if req.TargetNode != "" && !s.proxy.TLS() {
		return fmt.Errorf("%w: targetNode needs the proxy's TLS (--proxy-tls-cert and the rest): without certificates no node can be told from another", ErrBadRequest)
	}
	if req.TargetNode == "" && !s.cfg.AllowAnyTarget {
		// Whoever reaches the debug socket would otherwise send the
		// guest's memory, or here its definition, wherever they name.
		return fmt.Errorf("%w: name the target's node (targetNode; ferryctl migrate --to-node NODE), whose certificate the target's proxy must then hold; ferryd --migration-allow-any-target takes a bare address (a plain-TCP proxy needs it)", ErrBadRequest)
	}
	return nil
}

// cancelTarget tells the target to drop a migration it prepared that this
// node will not perform; the target also drops it by itself if no stream
// comes.
func (s *Source) cancelTarget(req MigrateRequest, id, owner string, why error) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	if _, err := s.proxy.ControlTo(ctx, req.Target, owner, peer.ControlRequest{Op: peer.OpCancel, Migration: id, Domain: req.Domain}); err != nil {
		s.log.Warn("the target did not take the cancel of a migration this node will not perform", zap.String("domain", req.Domain),
			zap.String("migration", id), zap.NamedError("why", why), zap.Error(err))
	}
}

// How a drive ended, for its record: forgotten, kept by the definition's
// retries, kept to be settled from, or kept for ferryctl recover.
type driveEnd int

const (
	driveSettled driveEnd = iota
	driveDefinitionLater
	driveUnsettled
	driveGivenUp
)

// jobStillHeld says whether this node's libvirt still holds the pre-copy
// migration's job, done with Perform and waiting for Confirm. libvirt ties
// that job to the connection that performed it: when that connection
// closes (a libvirtd stopping closes them all), its close callback ends the
// job as cancelled (CONFIRM3_CANCELLED), and a libvirtd started again
// resumes the guest here by itself, as "migration canceled". Handing the
// guest to the target then would make two copies, so the migration ends
// here instead, as one whose Perform failed. (A libvirtd killed outright
// runs no callback: its job stays PERFORM3_DONE and the guest paused.)
func jobStillHeld(conn *libvirtx.Conn) error {
	select {
	case <-conn.Done():
		return errors.New("this node's libvirt lost the migration's job before the target's finish (its libvirtd restarted, or the connection closed), and may resume the guest here by itself: the migration is cancelled, the guest stays here")
	default:
		return nil
	}
}

// persistentConfig is what a persistent guest's migration carries of its
// definition: the inactive config, without a monitor an earlier Ferry
// post-copy gave it, and whether it autostarts.
func persistentConfig(ctx context.Context, c *libvirtx.Conn, dom libvirt.Domain) (string, bool, error) {
	config, err := c.ConfigXML(ctx, dom)
	if err == nil {
		config, err = libvirtx.WithoutRecoveryMonitor(config)
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the guest's persistent definition, which goes with it: %w", err)
	}
	autostart, err := c.Autostart(ctx, dom)
	if err != nil {
		return "", false, fmt.Errorf("asking libvirt whether the guest autostarts: %w", err)
	}
	return config, autostart, nil
}

// failureReason joins what libvirt said with what the proxy and the
// migration link saw, so the reason names the plane that broke.
func (s *Source) failureReason(socket, domain string, err error, info api.ProxyInfo, since time.Time) string {
	var b strings.Builder
	b.WriteString("migration failed: ")
	b.WriteString(err.Error())
	if len(info.Errors) > 0 {
		fmt.Fprintf(&b, "; proxy: %s", info.Errors[0])
		if len(info.Errors) > 1 {
			fmt.Fprintf(&b, " (+%d more)", len(info.Errors)-1)
		}
	}
	if info.TargetLost != "" {
		fmt.Fprintf(&b, "; target: %s", info.TargetLost)
	}
	if links := s.linkEvents(socket, domain, since); len(links) > 0 {
		fmt.Fprintf(&b, "; migration link: %s", strings.Join(links, ", "))
	}
	return b.String()
}

// linkEvents are the migration interface's changes the job recorded since
// the drive began.
func (s *Source) linkEvents(socket, domain string, since time.Time) []string {
	j, err := s.tracker.JobByName(socket, domain)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range j.Events {
		if (e.Kind == EventLinkDown || e.Kind == EventLinkUp) && !e.Time.Before(since) {
			out = append(out, e.Detail+" at "+e.Time.Format("15:04:05.000"))
		}
	}
	return out
}

// Kinds of the job events that record the migration interface's link.
const (
	EventLinkDown = "linkDown"
	EventLinkUp   = "linkUp"
)

// daemonPID is the libvirt daemon's process at the other end of conn, the
// other process let into a migration's sockets; 0 if the kernel cannot
// say (a root daemon is let in anyway).
func daemonPID(conn *libvirtx.Conn) int {
	pid, _ := conn.DaemonPID()
	return pid
}

// sourceQEMU is the process ID of domain's QEMU, the one process besides
// libvirtd let into the migration's sockets; none is needed when QEMU's
// stream goes straight to the target (no socket here).
func sourceQEMU(socket, domain string, kinds []peer.Kind) (int, error) {
	if len(kinds) == 0 {
		return 0, nil
	}
	pid, err := libvirtx.QEMUPID(socket, domain)
	if err != nil {
		return 0, fmt.Errorf("naming the QEMU of %s, the one process let into its migration sockets: %w", domain, err)
	}
	return pid, nil
}
