package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
	"github.com/ferry-vm/ferry/proxy"
)

// MigrateRequest and MigrateResponse are the body and answer of
// POST /v1/migrations.
type (
	MigrateRequest  = migration.MigrateRequest
	MigrateResponse = migration.MigrateResponse
)

// Errors the API layer maps to status codes.
var (
	errBadRequest = errors.New("bad migration request")
	errConflict   = errors.New("conflict")
)

func validateMigrate(r MigrateRequest) error {
	var errs []string
	if r.Domain == "" {
		errs = append(errs, "domain is empty")
	}
	if _, port, err := net.SplitHostPort(r.Target); err != nil || port == "" {
		errs = append(errs, fmt.Sprintf("target %q is not the target node's proxy address HOST:PORT", r.Target))
	}
	if r.PostCopyAfterSeconds < 0 {
		errs = append(errs, "postCopyAfterSeconds is negative")
	}
	if r.BandwidthMiBs < 0 || r.PostCopyBandwidthMiBs < 0 {
		errs = append(errs, "bandwidth is negative")
	}
	if r.Parallel < 0 || r.Parallel > 64 {
		errs = append(errs, fmt.Sprintf("parallel %d is outside 0-64", r.Parallel))
	}
	if r.TargetNode != "" {
		for _, msg := range validation.IsDNS1123Subdomain(r.TargetNode) {
			errs = append(errs, fmt.Sprintf("targetNode %q is not a node name: %s", r.TargetNode, msg))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", errBadRequest, strings.Join(errs, "; "))
	}
	return nil
}

func newMigrationID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "m-" + hex.EncodeToString(b)
}

// Bounds of the protocol steps around Perform, whose own bound is the
// migration deadline. The target's Finish has none: in post-copy it lasts
// until the last page, and only its answer may decide the source's copy.
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
	// inDoubtAfter is how long the source asks for the finish's outcome
	// before its job shows InDoubt; it goes on asking after.
	inDoubtAfter = 30 * time.Second
)

// migrationPolicy is the node's policy with the request's overrides.
func migrationPolicy(node policy.Settings, req MigrateRequest) (policy.Settings, error) {
	p := node
	if req.Policy != "" {
		m, err := policy.ParseMode(req.Policy)
		if err != nil {
			return p, fmt.Errorf("%w: %v", errBadRequest, err)
		}
		p.Mode = m
	}
	// A request may only lower the node's cap: whoever may ask for a
	// migration may not thereby allow a longer guest pause than the node.
	if req.MaxDowntimeMs != 0 {
		p.MaxDowntimeMs = min(p.MaxDowntimeMs, req.MaxDowntimeMs)
	}
	// Asking for a migration with post-copy enabled allows it, as
	// KubeVirt's allowPostCopy does.
	p.AllowPostCopy = p.AllowPostCopy || req.PostCopy
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return p, nil
}

// migrateFlags are libvirt's flags and parameters for the request, the
// same for every step; Perform adds its URI. No PEER2PEER: this ferryd
// runs the protocol itself and libvirt never talks to the target's libvirt.
// CHANGE_PROTECTION, as libvirt's own client: Begin starts libvirt's job,
// so the domain's definition cannot change (a hotplug) between the XML
// sent to the target and Perform; a step that fails before Perform ends
// that job with a cancelled Confirm. A persistent domain is defined on the
// target and undefined here once it runs there, so that no second copy
// can be started from a definition left behind (see persistentFlags).
func migrateFlags(req MigrateRequest) (libvirt.DomainMigrateFlags, []libvirt.TypedParam) {
	flags := libvirt.MigrateLive | libvirt.MigrateChangeProtection
	var params []libvirt.TypedParam
	if req.PostCopy || req.PostCopyAfterSeconds > 0 {
		flags |= libvirt.MigratePostcopy
	}
	if req.AutoConverge {
		flags |= libvirt.MigrateAutoConverge
	}
	if req.BandwidthMiBs > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidth, Value: *libvirt.NewTypedParamValueUllong(uint64(req.BandwidthMiBs))})
	}
	if req.PostCopyBandwidthMiBs > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidthPostcopy, Value: *libvirt.NewTypedParamValueUllong(uint64(req.PostCopyBandwidthMiBs))})
	}
	if req.Parallel > 0 {
		flags |= libvirt.MigrateParallel
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamParallelConnections, Value: *libvirt.NewTypedParamValueInt(int32(req.Parallel))})
	}
	return flags, params
}

// startMigration runs libvirt's Begin here, has the target prepare the
// migration on its own libvirt, and opens the source sockets; it returns
// once the target is ready, and the migration goes on in the background.
func (d *Daemon) startMigration(ctx context.Context, req MigrateRequest) (MigrateResponse, error) {
	if d.Proxy == nil {
		return MigrateResponse{}, fmt.Errorf("%w: this ferryd runs without a migration proxy (--proxy-listen is empty)", errConflict)
	}
	if err := validateMigrate(req); err != nil {
		return MigrateResponse{}, err
	}
	if req.TargetNode != "" && !d.Proxy.TLS() {
		return MigrateResponse{}, fmt.Errorf("%w: targetNode needs the proxy's TLS (--proxy-tls-cert and the rest): without certificates no node can be told from another", errBadRequest)
	}
	if req.TargetNode == "" && !d.cfg.MigrationAllowAnyTarget {
		// Whoever reaches the debug socket would otherwise send the
		// guest's memory wherever they name.
		return MigrateResponse{}, fmt.Errorf("%w: name the target's node (targetNode; ferryctl migrate --to-node NODE), whose certificate the target's proxy must then hold; ferryd --migration-allow-any-target takes a bare address (a plain-TCP proxy needs it)", errBadRequest)
	}
	pol, err := migrationPolicy(d.cfg.Policy, req)
	if err != nil {
		return MigrateResponse{}, err
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
	conn, dom, err := d.Tracker.ConnFor(req.Socket, req.Domain)
	if err != nil {
		return MigrateResponse{}, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	mem, err := conn.MemoryBytes(ctx, dom)
	if err != nil {
		return MigrateResponse{}, fmt.Errorf("reading the guest's memory size, which sets the migration's deadline: %w", err)
	}
	deadline := libvirtx.MigrationDeadline(mem, req.BandwidthMiBs)
	// Keyed by socket too: a pod's domain of the same name must not
	// block this one's migration.
	drive := driveKey(conn.Socket(), req.Domain)
	if d.Tracker.InFlight(conn.Socket(), req.Domain) {
		return MigrateResponse{}, fmt.Errorf("%w: %s is already migrating", errConflict, req.Domain)
	}
	if !d.drives.start(drive) {
		return MigrateResponse{}, fmt.Errorf("%w: Ferry is already driving a migration of %s", errConflict, req.Domain)
	}
	// The protocol's steps run on a libvirt connection of the migration's
	// own, for as long as it lasts: libvirt ties a migration's state to
	// the connection that runs it, and the pool's connection is cut on one
	// missed ping, which would end the migration with it.
	own, err := conn.Another(ctx)
	if err != nil {
		d.drives.end(drive)
		return MigrateResponse{}, fmt.Errorf("opening the migration's own libvirt connection: %w", err)
	}
	ownHanded := false
	defer func() {
		if !ownHanded {
			own.Close()
		}
	}()
	id := newMigrationID()
	begun := time.Now()
	flags, params := migrateFlags(req)
	persistent, err := own.Persistent(ctx, dom)
	if err != nil {
		d.drives.end(drive)
		return MigrateResponse{}, fmt.Errorf("asking libvirt whether %s is persistent: %w", req.Domain, err)
	}
	if persistent {
		// The target defines the guest itself and says so; only then is
		// the definition here removed (see drive).
		flags |= libvirt.MigratePersistDest
	}
	domXML, cookie, err := own.Begin(ctx, dom, params, flags)
	if err != nil {
		d.drives.end(drive)
		return MigrateResponse{}, fmt.Errorf("libvirt's Begin on this node: %w", err)
	}
	// Begin started libvirt's job (CHANGE_PROTECTION): until Perform takes
	// it over, a failure ends it with a cancelled Confirm, as libvirt's
	// own client does.
	performing := false
	defer func() {
		if !performing {
			if err := own.Confirm(context.Background(), dom, params, nil, flags, true, confirmTimeout); err != nil {
				d.log.Warn("ending libvirt's migration job after a failed start", zap.String("domain", req.Domain), zap.Error(err))
			}
		}
	}()
	// A target node named by the caller is checked on the certificate
	// before the domain's XML is sent anywhere.
	want := ""
	if req.TargetNode != "" {
		want = proxy.NodeOwner(req.TargetNode)
	}
	prep, err := d.Proxy.ControlTo(ctx, req.Target, want, proxy.ControlRequest{Op: proxy.OpPrepare, Migration: id, Domain: req.Domain,
		XML: domXML, Cookie: cookie, Flags: uint32(flags), Parallel: req.Parallel, PostCopy: flags&libvirt.MigratePostcopy != 0,
		DeadlineSeconds: deadline.Seconds()})
	if err != nil {
		d.drives.end(drive)
		var wp *proxy.WrongPeerError
		if errors.As(err, &wp) {
			err = fmt.Errorf("target proxy %s is %s, not node %s, which the migration asked for", wp.Addr, wp.Got, req.TargetNode)
		}
		err = fmt.Errorf("preparing the migration on the target: %w", err)
		// No libvirt job ever started, so nothing else would record it: a
		// failed job keeps the failure, its class and its count.
		d.Tracker.PrepareFailed(req.Domain, dom, conn.Socket(), begun,
			migration.ProxyInfo{MigrationID: id, Target: req.Target, TLS: d.Proxy.TLS(), Parallel: req.Parallel}, err.Error())
		return MigrateResponse{}, err
	}
	// The target's id, not ours, names the streams and the finish: the
	// target chose it, and only the two nodes know it.
	tid := prep.Migration
	if proxy.ValidID(tid) != nil {
		d.drives.end(drive)
		return MigrateResponse{}, fmt.Errorf("the target answered the prepare with no valid migration id %q", tid)
	}
	src, err := d.Proxy.OpenSource(tid, req.Target, []proxy.Kind{proxy.KindMemory})
	if err != nil {
		d.cancelTarget(req, tid, prep.Owner, err)
		d.drives.end(drive)
		return MigrateResponse{}, err
	}
	// The streams go to the node that prepared the migration, nowhere
	// else the target's address might lead meanwhile.
	src.BindTarget(prep.Owner)
	info := migration.ProxyInfo{MigrationID: id, Target: req.Target, TargetNode: prep.PeerNode, TLS: d.Proxy.TLS(), Parallel: req.Parallel}
	rec := drivenRecord{ID: id, TargetID: tid, Domain: req.Domain, UUID: libvirtx.UUIDString(dom.UUID), Socket: own.Socket(), Target: req.Target, TargetOwner: src.Owner(),
		TargetNode: prep.PeerNode, Flags: uint32(flags), Started: begun}
	if err := d.recordDrive(rec); err != nil {
		d.cancelTarget(req, tid, prep.Owner, err)
		src.Close("not started")
		d.drives.end(drive)
		return MigrateResponse{}, fmt.Errorf("recording the migration in the state directory, which a restart would need: %w", err)
	}
	performing, ownHanded = true, true
	d.steer.drive(req.Domain, drivenPolicy{id: id, settings: pol, postCopy: flags&libvirt.MigratePostcopy != 0, deadline: deadline})
	d.Tracker.Drive(conn.Socket(), req.Domain, info)
	go func() {
		defer d.drives.end(drive)
		defer own.Close()
		// A migration left unsettled keeps its record, for the next
		// start of ferryd or an operator.
		if d.drive(req, rec, own, dom, src, info, flags, params, prep.Cookie, deadline) {
			d.forgetDrive(id)
		}
	}()
	msg := "migration started through the Ferry proxy"
	if prep.PeerNode != "" {
		msg += " to node " + prep.PeerNode
	}
	if !d.Proxy.TLS() {
		msg += " (plain TCP: trusted migration network only)"
	}
	return MigrateResponse{MigrationID: id, Domain: req.Domain, Target: req.Target, TLS: d.Proxy.TLS(), TargetNode: prep.PeerNode, Message: msg}, nil
}

// cancelTarget tells the target to drop a migration it prepared that this
// node will not perform; the target also drops it by itself if no stream
// comes.
func (d *Daemon) cancelTarget(req MigrateRequest, id, owner string, why error) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	if _, err := d.Proxy.ControlTo(ctx, req.Target, owner, proxy.ControlRequest{Op: proxy.OpCancel, Migration: id, Domain: req.Domain}); err != nil {
		d.log.Warn("the target did not take the cancel of a migration this node will not perform", zap.String("domain", req.Domain),
			zap.String("migration", id), zap.NamedError("why", why), zap.Error(err))
	}
}

// drive runs Perform here, Finish on the target and Confirm here, then
// tears down the source sockets and leaves the whole account on the job.
// id is this node's label of the migration, tid the target's id.
func (d *Daemon) drive(req MigrateRequest, rec drivenRecord, conn *libvirtx.Conn, dom libvirt.Domain, src *proxy.SourceMigration,
	info migration.ProxyInfo, flags libvirt.DomainMigrateFlags, params []libvirt.TypedParam, cookie []byte, deadline time.Duration) (settled bool) {
	id, tid := rec.ID, rec.TargetID
	settled = true
	log := d.log.With(zap.String("domain", req.Domain), zap.String("migration", id), zap.String("target", req.Target), zap.String("targetNode", info.TargetNode))
	start := time.Now()
	perform := append([]libvirt.TypedParam{{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString("unix://" + src.Paths[proxy.KindMemory])}}, params...)
	log.Info("starting a Ferry-driven migration", zap.Bool("postCopy", flags&libvirt.MigratePostcopy != 0), zap.Int("parallel", req.Parallel), zap.Duration("deadline", deadline))

	finished := make(chan struct{})
	if req.PostCopyAfterSeconds > 0 {
		go d.switchAfter(log, conn.Socket(), req.Domain, time.Duration(req.PostCopyAfterSeconds*float64(time.Second)), finished)
	}
	// Perform blocks until the migration ends, or in post-copy until the
	// switch, while the tracker samples on the pool's connection. Past
	// its deadline (KubeVirt's 150 s per GiB of guest memory, see
	// MigrationDeadline) libvirt's job is aborted, not just abandoned.
	// With post-copy allowed, the policy switches at the deadline (act
	// mode): Perform's own backstop waits a little longer, so that it
	// aborts only a migration the switch did not reach.
	backstop := deadline
	if flags&libvirt.MigratePostcopy != 0 {
		backstop += postCopyGrace
	}
	performCookie, perr := conn.Perform(context.Background(), dom, perform, cookie, flags, backstop)
	close(finished)

	// The streams keep relaying until the target's Finish has returned:
	// in post-copy the guest runs there and pulls its last pages through
	// them. Only the proxy that prepared the migration may finish it.
	var ferr, cerr error
	if perr != nil {
		// As libvirt's own client does: a failed Perform has ended the
		// job here (and resumed the guest, in pre-copy), so there is no
		// Confirm; the target is told to drop its copy, and drops it by
		// itself if this does not reach it.
		fctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
		var fin proxy.ControlResponse
		fin, ferr = d.Proxy.ControlTo(fctx, req.Target, src.Owner(), proxy.ControlRequest{Op: proxy.OpFinish, Migration: tid, Domain: req.Domain,
			Cookie: performCookie, Cancelled: true})
		cancel()
		log.Info("the target's answer to the cancelled finish", zap.String("outcome", fin.Outcome), zap.Error(ferr))
		// Not always so: a libvirtd restarted after QEMU finished leaves
		// the guest paused here, its job gone. It runs again only on the
		// target's word that its copy is gone.
		if st, rs, err := conn.DomainState(context.Background(), dom); err == nil && st == libvirtx.StatePaused && rs == int32(libvirt.DomainPausedMigration) {
			outcome := settledOutcome(fin, ferr)
			what, aerr := applyOutcome(context.Background(), conn, rec, outcome)
			if outcome == "" || aerr != nil {
				settled = false
				log.Error("the guest is left paused here by a failed migration, and the target has not said its copy is gone; the record stays for the next start", zap.NamedError("finish", ferr), zap.Error(aerr))
			} else {
				log.Warn("the guest was left paused by a failed migration", zap.String("outcome", outcome), zap.String("here", what))
			}
		}
	} else {
		// The guest is paused here, whole, and may run there: only the
		// target's word decides which copy lives.
		fin, outcome := d.settleFinish(log, req, tid, src, performCookie, conn.Socket(), dom, flags&libvirt.MigratePostcopy != 0)
		if fin.Reason == resolvedByOperator {
			log.Warn("the migration was settled by an operator", zap.String("outcome", outcome))
		}
		// Only a guest running whole on the target ends the source's
		// copy. With none there the source's runs again (pre-copy); with
		// post-copy failed (split), libvirt keeps the source's paused.
		cancelled := outcome != proxy.OutcomeRunning
		if cancelled {
			ferr = fmt.Errorf("the target's copy is %s: %s", outcome, fin.Error)
		}
		cerr = conn.Confirm(context.Background(), dom, params, fin.Cookie, flags, cancelled, confirmTimeout)
		if cerr != nil {
			// Confirm's job is done by hand, by the target's word, or the
			// record stays for the next start.
			what, aerr := applyOutcome(context.Background(), conn, rec, outcome)
			log.Warn("libvirt's Confirm failed; applied the target's word by hand", zap.Bool("cancelled", cancelled), zap.Error(cerr), zap.String("here", what), zap.NamedError("byHand", aerr))
			if aerr != nil {
				settled = false
			}
		}
		if cerr == nil && !cancelled && fin.Persisted {
			// One definition, the target's: this one goes.
			if err := conn.Undefine(context.Background(), dom); err != nil && !libvirtx.IsNoDomain(err) {
				log.Error("the guest is defined on the target, and its definition here could not be removed", zap.Error(err))
			}
		}
	}
	src.Close("migration ended")

	var err error
	switch {
	case perr != nil:
		err = perr
	case ferr != nil:
		err = fmt.Errorf("the target did not finish it: %w", ferr)
	case cerr != nil:
		err = fmt.Errorf("libvirt's Confirm on this node: %w", cerr)
	}
	info.Bytes = src.Counters.Snapshot()
	info.Errors = src.Errors()
	if perr != nil {
		info.TargetLost = targetLost(ferr)
	}
	failure := ""
	if err != nil {
		failure = d.failureReason(conn.Socket(), req.Domain, err, info, start)
		log.Warn("Ferry-driven migration failed", zap.String("reason", failure))
	} else {
		log.Info("Ferry-driven migration completed", zap.Duration("took", time.Since(start)))
	}
	d.Tracker.DriveEnded(req.Domain, dom, conn.Socket(), start, info, failure)
	return settled
}

// switchAfter switches the migration to post-copy after wait. Asked before
// QEMU's migration is active (a busy machine: the tracker has no job yet,
// or QEMU refuses), it asks again until the switch is taken or the
// migration ends, rather than losing it.
func (d *Daemon) switchAfter(log *zap.Logger, socket, domain string, wait time.Duration, finished <-chan struct{}) {
	next := time.After(wait)
	var last error
	for tries := 0; ; tries++ {
		select {
		case <-finished:
			if last != nil {
				log.Warn("the migration ended before it could be switched to post-copy", zap.Int("tries", tries), zap.Error(last))
			}
			return
		case <-next:
		}
		_, err := d.Tracker.StartPostCopy(socket, domain, func(c *libvirtx.Conn, ref libvirt.Domain) error {
			return c.StartPostCopy(context.Background(), ref)
		})
		if err == nil || errors.Is(err, migration.ErrAlreadyPostCopy) {
			log.Info("switched to post-copy", zap.Int("tries", tries+1))
			return
		}
		last = err
		next = time.After(200 * time.Millisecond)
	}
}

// settleFinish asks the target to finish until it says for certain whether
// the guest runs there (a lost answer, a reset, a restarted target ferryd
// are asked again), and returns its answer and that outcome. Past
// inDoubtAfter the job shows InDoubt; the guest stays paused here
// meanwhile, which is the one state that cannot become two guests.
func (d *Daemon) settleFinish(log *zap.Logger, req MigrateRequest, tid string, src *proxy.SourceMigration, cookie []byte,
	socket string, dom libvirt.Domain, postCopy bool) (proxy.ControlResponse, string) {
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
		resp, err := d.Proxy.ControlTo(ctx, req.Target, src.Owner(), proxy.ControlRequest{Op: proxy.OpFinish,
			Migration: tid, Domain: req.Domain, Cookie: cookie})
		cancel()
		if outcome := settledOutcome(resp, err); outcome != "" {
			if inDoubt {
				log.Warn("the migration's outcome is settled", zap.String("outcome", outcome), zap.Int("attempts", attempt))
			}
			return resp, outcome
		}
		log.Warn("the target's finish gave no outcome; asking again", zap.Int("attempt", attempt), zap.Error(err))
		if !inDoubt && time.Since(first) >= inDoubtAfter {
			inDoubt = true
			why := fmt.Sprintf("in doubt: the target has not said whether the guest runs there (%d attempts over %s; last: %v); the guest stays paused on this node until it does, or an operator decides (ferryctl resolve)", attempt, time.Since(first).Round(time.Second), err)
			log.Error("migration in doubt", zap.String("why", why))
			d.Tracker.DriveInDoubt(socket, req.Domain, why)
			d.drives.doubt(driveKey(socket, req.Domain))
		}
		select {
		case outcome := <-d.drives.decisions(driveKey(socket, req.Domain)):
			return proxy.ControlResponse{Reason: resolvedByOperator, Error: "settled by an operator: the target's copy is taken as " + outcome}, outcome
		case <-time.After(min(time.Duration(attempt)*time.Second, 5*time.Second)):
		}
	}
}

// resolvedByOperator marks an outcome an operator gave (ferryctl resolve).
const resolvedByOperator = "resolved_by_operator"

// settledOutcome is what a finish's answer settles: whether the guest runs
// on the target, or "" when it says nothing for certain. A plain success
// is libvirt's Finish having returned the domain there.
func settledOutcome(resp proxy.ControlResponse, err error) string {
	var ce *proxy.ControlError
	switch {
	case err == nil && resp.Outcome == "":
		return proxy.OutcomeRunning
	case err == nil, errors.As(err, &ce):
		return resp.Outcome
	}
	return ""
}

// failureReason joins what libvirt said with what the proxy and the
// migration link saw, so the reason names the plane that broke.
func (d *Daemon) failureReason(socket, domain string, err error, info migration.ProxyInfo, since time.Time) string {
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
	if links := d.linkEvents(socket, domain, since); len(links) > 0 {
		fmt.Fprintf(&b, "; migration link: %s", strings.Join(links, ", "))
	}
	return b.String()
}

// linkEvents are the migration interface's changes the job recorded since
// the drive began.
func (d *Daemon) linkEvents(socket, domain string, since time.Time) []string {
	j, err := d.Tracker.JobByName(socket, domain)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range j.Events {
		if (e.Kind == eventLinkDown || e.Kind == eventLinkUp) && !e.Time.Before(since) {
			out = append(out, e.Detail+" at "+e.Time.Format("15:04:05.000"))
		}
	}
	return out
}

// targetGrace is how long a target waits, once its side of the job has
// ended, for the source's finish or cancel before it drops the migration
// itself.
const targetGrace = 30 * time.Second

// jobFinished drops the target side's prepared migration some time after
// its job ends, so a source that cannot reach the target any more (link
// down, source crashed) does not leave it waiting for a finish.
func (d *Daemon) jobFinished(j migration.Job) {
	d.reportVMI(j)
	if d.Proxy == nil || j.Role != migration.RoleTarget {
		return
	}
	// Only the job's own migration, named at its prepare: one of the same
	// domain prepared since (it migrates back and forth) is another. A job
	// with no name owns nothing this proxy holds: it was not prepared
	// through it, or before a restart that emptied the proxy's registry.
	if j.IncomingID == "" {
		return
	}
	ended := []string{j.IncomingID}
	time.AfterFunc(targetGrace, func() {
		if ids := d.Proxy.Abandon(ended, "target job ended "+string(j.Phase)+" with no word from the source"); len(ids) > 0 {
			d.log.Info("incoming migrations dropped after the job", zap.String("domain", j.Domain), zap.Strings("migrations", ids))
		}
	})
}

// Kinds of the job events that record the migration interface's link.
const (
	eventLinkDown = "linkDown"
	eventLinkUp   = "linkUp"
)

// linkChanged records the migration interface going down or up on every
// in-flight job: evidence for whatever happens next, and part of the
// failure reason of a migration Ferry drives.
func (d *Daemon) linkChanged(up bool) {
	state, kind := "down", eventLinkDown
	if up {
		state, kind = "up", eventLinkUp
	}
	d.Tracker.NoteEvent(kind, fmt.Sprintf("%s went %s", d.cfg.MigrationInterface, state))
	d.log.Warn("migration interface changed", zap.String("interface", d.cfg.MigrationInterface), zap.String("state", state))
}

// targetLost tells a finish that found the target's proxy gone from one
// that failed otherwise: a cut link times out, a reset stream leaves the
// target's proxy there to answer.
func targetLost(ferr error) string {
	var ce *proxy.ControlError
	switch {
	case ferr == nil:
		return ""
	case errors.Is(ferr, syscall.ECONNREFUSED):
		return "the finish found nothing listening at its proxy's address (its ferryd is likely down)"
	case errors.As(ferr, &ce) && ce.Reason == proxy.ReasonUnknownMigration:
		return "its proxy does not know the migration (its ferryd restarted, or the migration is not bound to this node's identity)"
	case errors.As(ferr, &ce) && ce.Reason == proxy.ReasonRestarted:
		return "its ferryd restarted since the prepare, and with it the connection its libvirt held the incoming guest by"
	}
	return ""
}
