package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/peer"
)

// TargetSocketPath is where the target QEMU of a migration listens for a
// stream on this node.
func TargetSocketPath(dir, id string, k peer.Kind) string {
	port := "49152"
	if k == peer.KindDisk {
		port = "49153"
	}
	return filepath.Join(dir, id+"-"+port+"-target.sock")
}

// newIncoming describes a migration of domain whose memory comes in
// 1+parallel connections, one more if post-copy may be used (QEMU opens a
// second channel for post-copy's page requests), and disk in one, if
// asked, to sockets in this node's socket dir.
func (p *Proxy) newIncoming(id, domain string, parallel int, postCopy, disk bool, ttl time.Duration) Migration {
	memory := 1 + parallel
	if postCopy {
		memory++
	}
	m := Migration{ID: id, Domain: domain, State: statePreparing, Expires: time.Now().Add(ttl),
		Targets: map[peer.Kind]string{peer.KindMemory: TargetSocketPath(p.cfg.SocketDir, id, peer.KindMemory)},
		Limits:  map[peer.Kind]int{peer.KindMemory: memory}}
	if disk {
		m.Targets[peer.KindDisk] = TargetSocketPath(p.cfg.SocketDir, id, peer.KindDisk)
		m.Limits[peer.KindDisk] = 1
	}
	return m
}

func (p *Proxy) prepare(raw, c net.Conn, req peer.ControlRequest, who Peer, checked func()) peer.ControlResponse {
	if req.DryRun {
		req.RecoverSeconds = 0
	}
	pr := &preparing{p: p, raw: raw, req: req, who: who}
	if resp, ok := pr.build(); !ok {
		return resp
	}
	checkedXML, resp, ok := pr.check(checked)
	if !ok {
		return resp
	}
	m := pr.m
	if err := p.reg.add(m, pr.in, who.owner()); err != nil {
		return pr.refuse(refusalReason(err, reasonMalformedRequest), err.Error())
	}
	if _, err := p.socketGroup(); err != nil {
		p.Unregister(m.ID, "prepare failed")
		p.log.Warn("cannot give QEMU the migration socket dir", zap.Error(err))
		msg := "this node cannot give its QEMU a migration socket (see its log)"
		var ug *unknownGroupError
		if errors.As(err, &ug) {
			msg = p.scrub(err.Error())
		}
		return pr.refuse(refusalReason(err, reasonPrepareFailed), "prepare: "+msg)
	}
	cookie, uri, cpu, resp, ok := pr.prepareLibvirt(checkedXML)
	if !ok {
		return resp
	}
	start := pr.started
	if req.DryRun {
		return p.endDryRun(*pr.in, cpu, time.Since(start))
	}
	in := *pr.in
	p.hideMonitor(in)
	p.hideTargets(in)
	if err := p.monitorIsOurs(in); err != nil {
		p.log.Error("an incoming post-copy migration is refused: its recovery monitor is not ferryd's", zap.String("migration", m.ID),
			zap.String("domain", m.Domain), zap.Error(err))
		p.cancelLibvirt(in, "its recovery monitor is not ferryd's")
		p.Unregister(m.ID, "prepare failed")
		p.dropMonitor(m.ID)
		return pr.refuse(reasonPrepareFailed, "prepare: this node's QEMU for the guest cannot be resumed by Ferry (see its log)")
	}
	e, err := p.reg.setState(m.ID, m.Domain, statePreparing, statePrepared)
	if err != nil {
		// Cut meanwhile (the node is shutting down): libvirt must not
		// keep a target QEMU nobody will finish.
		p.cancelLibvirt(in, "cut while preparing")
		return pr.refuse(refusalReason(err, peer.ReasonShuttingDown), err.Error())
	}
	pr.arm(e)
	if resp, ok := pr.record(e); !ok {
		return resp
	}
	p.log.Info("incoming migration prepared", zap.String("migration", m.ID), zap.String("label", req.Migration), zap.String("domain", m.Domain),
		zap.Int("parallel", req.Parallel), zap.Bool("postCopy", req.PostCopy), zap.Bool("disk", req.Disk), zap.Duration("took", time.Since(start)),
		zap.Time("expires", m.Expires), zap.String("peer", raw.RemoteAddr().String()), zap.String("peerNode", who.Node))
	if in.Direct {
		// From the answer on, which names QEMU's address to the source.
		p.awaitDirect(e, m.ID, uri, raw.RemoteAddr())
	}
	return peer.ControlResponse{Migration: m.ID, Cookie: cookie, URI: uri}
}

// preparing is one peer's prepare request while it is taken: the
// migration it comes to and how it is refused.
type preparing struct {
	p   *Proxy
	raw net.Conn
	req peer.ControlRequest
	who Peer
	m   Migration
	// in is the migration as the registry keeps it, from add on: a value
	// of its own, so that the registry never keeps the request (its XML)
	// alive with it.
	in      *peer.IncomingMigration
	ttl     time.Duration
	started time.Time // libvirt's Prepare
}

// refuse says no to the peer; a dry run's "no" is its answer, not a
// refusal of the peer.
func (pr *preparing) refuse(reason, detail string) peer.ControlResponse {
	if pr.req.DryRun {
		return pr.p.answerDryRun(pr.raw, pr.who.Node, pr.req, reason, detail)
	}
	return pr.p.refusePeer(pr.raw, pr.who.Node, pr.req, reason, detail)
}

// build checks the request's bounds and makes the migration it asks for,
// with its sockets here, never where the peer says.
func (pr *preparing) build() (peer.ControlResponse, bool) {
	p, req, who := pr.p, pr.req, pr.who
	if p.cfg.Incoming == nil {
		return pr.refuse(reasonIncomingDisabled, "this node takes no Ferry-driven incoming migrations"), false
	}
	if len(req.XML) == 0 || len(req.XML)+len(req.Config) > peer.MaxDomainXML {
		return pr.refuse("invalid_domain_xml", fmt.Sprintf("domain XML of %d bytes and definition of %d (1 to %d together)", len(req.XML), len(req.Config), peer.MaxDomainXML)), false
	}
	if req.Parallel < 0 || req.Parallel > peer.MaxParallel {
		return pr.refuse(reasonMalformedRequest, fmt.Sprintf("parallel %d is outside 0-%d", req.Parallel, peer.MaxParallel)), false
	}
	pr.ttl = p.cfg.RegistrationTTL
	if req.DeadlineSeconds > 0 && req.DeadlineSeconds < pr.ttl.Seconds() {
		pr.ttl = min(pr.ttl, time.Duration(req.DeadlineSeconds*float64(time.Second))+p.cfg.PrepareTimeout)
	}
	m := p.newIncoming(p.newID(req.Migration), req.Domain, req.Parallel, req.PostCopy, req.Disk, pr.ttl)
	m.PeerNode = who.Node
	in := peer.IncomingMigration{ID: m.ID, Domain: m.Domain, Config: req.Config, Flags: req.Flags, Parallel: req.Parallel, PostCopy: req.PostCopy,
		MemoryURI: "unix://" + m.Targets[peer.KindMemory], PeerNode: who.Node, DryRun: req.DryRun}
	if req.Disk {
		in.DiskURI = "unix://" + m.Targets[peer.KindDisk]
	}
	if req.Direct {
		host, reason, why := p.directFrom(pr.raw, who, req)
		if why != "" && reason == reasonDirectNotAllowed {
			// What the direct path is never open to (a peer not listed,
			// or post-copy or a disk stream, which Ferry's own sources do
			// not ask) is refused, and counted, in a dry run too.
			return p.refusePeer(pr.raw, who.Node, req, reason, why), false
		}
		if why != "" {
			return pr.refuse(reason, why), false
		}
		in.Direct, in.ListenAddress = true, host
		in.MemoryURI = "tcp://" + hostForURI(host)
		// No stream of it may come through here.
		m.Limits[peer.KindMemory] = 0
	}
	if req.PostCopy && req.RecoverSeconds > 0 && !req.Direct {
		in.MonitorPath = TargetMonitorPath(p.cfg.SocketDir, m.ID)
		in.RecoverFor = time.Duration(min(req.RecoverSeconds, maxRecoverSeconds) * float64(time.Second))
		if req.LibvirtResume {
			ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
			in.LibvirtResume = p.cfg.Incoming.ResumesPostCopy(ctx)
			cancel()
		}
	}
	pr.m, pr.in = m, &in
	return peer.ControlResponse{}, true
}

// check has the target check the request's XML, in the peer's turn. The
// result goes to this migration's Prepare alone, never into what the
// registry keeps and copies.
func (pr *preparing) check(checked func()) (*peer.CheckedXML, peer.ControlResponse, bool) {
	defer checked()
	turn, err := pr.p.startChecking(pr.who, pr.raw, time.Now().Add(pr.p.cfg.PrepareTimeout))
	if err != nil {
		return nil, pr.refuse(reasonTooManyReading, "prepare: "+err.Error()), false
	}
	checkedXML, err := pr.p.cfg.Incoming.Check(*pr.in, pr.req.XML)
	turn()
	if err != nil {
		return nil, pr.refuse(refusalReason(err, reasonPrepareFailed), "prepare: "+err.Error()), false
	}
	return checkedXML, peer.ControlResponse{}, true
}

// prepareLibvirt runs libvirt's Prepare (a dry run compares the CPU
// first): its cookie and, for a direct migration, the target QEMU's URI.
func (pr *preparing) prepareLibvirt(checkedXML *peer.CheckedXML) (cookie []byte, uri, cpu string, resp peer.ControlResponse, ok bool) {
	p, req, id := pr.p, pr.req, pr.m.ID
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PrepareTimeout)
	defer cancel()
	pin := *pr.in
	pin.Checked = checkedXML
	var err error
	if req.DryRun {
		if cpu, err = p.cfg.Incoming.CompareCPU(ctx, pin, req.XML); err != nil {
			p.Unregister(id, "dry run: cpu")
			return nil, "", "", pr.refuse(refusalReason(err, reasonPrepareFailed), "cpu: "+err.Error()), false
		}
	}
	pr.started = time.Now()
	if pin.Direct {
		cookie, uri, err = p.cfg.Incoming.PrepareDirect(ctx, pin, req.XML, req.Cookie)
	} else {
		cookie, err = p.cfg.Incoming.Prepare(ctx, pin, req.XML, req.Cookie)
	}
	if err != nil {
		p.Unregister(id, "prepare failed")
		os.Remove(pin.MonitorPath)
		p.dropMonitor(id) // moved already by the watch
		return nil, "", "", pr.refuse(refusalReason(err, reasonPrepareFailed), "prepare: "+err.Error()), false
	}
	return cookie, uri, cpu, peer.ControlResponse{}, true
}

// arm sets the timers of a prepared migration: a source that never opens
// a stream, or never finishes, must not leave a target QEMU waiting; one
// past its time whose guest runs here in post-copy is kept.
func (pr *preparing) arm(e *entry) {
	p, id := pr.p, pr.m.ID
	if pr.in.Direct {
		// Its data never crosses this proxy: it is under way from now, for
		// the finish and for a shutdown, and bounded by its time alone.
		p.reg.markStarted(e)
	} else {
		p.reg.addTimer(e, p.cfg.FirstStreamWait, func() {
			if !p.reg.hasStarted(e) {
				p.dropIncoming(id, fmt.Sprintf("no data stream within %v of the prepare", p.cfg.FirstStreamWait))
			}
		})
	}
	var expire func()
	expire = func() {
		if why, held := p.held(e); held {
			p.log.Error("an incoming migration past its time is kept: dropping it would lose its guest", zap.String("migration", id),
				zap.String("domain", pr.m.Domain), zap.String("why", why))
			p.reg.addTimer(e, heldRecheck, expire)
			return
		}
		p.dropIncoming(id, fmt.Sprintf("not finished within %v", pr.ttl))
	}
	p.reg.addTimer(e, pr.ttl, expire)
}

// record keeps the prepared migration before the answer, with the guest
// instance it started: a ferryd restarted later still knows what it
// prepared, and so what a finish of it asks.
func (pr *preparing) record(e *entry) (peer.ControlResponse, bool) {
	p, id := pr.p, pr.m.ID
	ictx, icancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout+30*time.Second)
	inst, err := p.cfg.Incoming.Instance(ictx, *pr.in)
	icancel()
	if err != nil {
		p.dropIncoming(id, "its guest instance could not be named: "+err.Error())
		return pr.refuse(reasonPrepareFailed, "prepare: this node cannot name the guest it started (see its log)"), false
	}
	p.reg.setInstance(e, inst)
	in := p.reg.incomingOf(e)
	if err := p.saveRecord(outcomeRecord{ID: id, Owner: pr.who.owner(), Domain: pr.m.Domain, Instance: in.Instance, LibvirtResume: in.LibvirtResume}); err != nil {
		p.dropIncoming(id, "its record could not be kept")
		return pr.refuse(reasonPrepareFailed, "prepare: this node cannot record the migration (see its log)"), false
	}
	return peer.ControlResponse{}, true
}

// endDryRun stops the guest a dry run's Prepare started, before the
// answer: nothing of a dry run waits on its source.
func (p *Proxy) endDryRun(in peer.IncomingMigration, cpu string, took time.Duration) peer.ControlResponse {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	err := p.cfg.Incoming.Cancel(ctx, in)
	p.Unregister(in.ID, "dry run")
	if err != nil {
		p.log.Warn("a dry run's guest was started and not stopped", zap.String("domain", in.Domain), zap.Error(err))
		return peer.ControlResponse{Error: p.scrub("the target's libvirt prepared the migration, and stopping its guest failed: " + err.Error())}
	}
	p.log.Info("dry run: this node would take the migration", zap.String("domain", in.Domain), zap.String("peerNode", in.PeerNode),
		zap.String("cpu", cpu), zap.Bool("direct", in.Direct), zap.Duration("prepareTook", took))
	if cpu == "" {
		cpu = "not compared"
	}
	return peer.ControlResponse{CPU: cpu}
}

// answerDryRun is a dry run's negative answer: logged, not counted as a
// refusal of the peer.
func (p *Proxy) answerDryRun(raw net.Conn, peerNode string, req peer.ControlRequest, reason, detail string) peer.ControlResponse {
	p.log.Info("dry run: this node would not take the migration", zap.String("reason", reason), zap.String("detail", detail),
		zap.String("domain", req.Domain), zap.String("peer", raw.RemoteAddr().String()), zap.String("peerNode", peerNode))
	return peer.ControlResponse{Error: p.scrub(detail), Reason: reason}
}

// finish runs libvirt's Finish. The migration's streams stay relayable
// until it returns: in post-copy the guest runs here and pulls its last
// pages through them meanwhile. The answer says whether the guest runs
// here afterwards (Outcome), which is what the source decides by; it is
// kept, on disk too, for a repeat of the finish.
func (p *Proxy) finish(raw, c net.Conn, req peer.ControlRequest, who Peer) peer.ControlResponse {
	owner := who.owner()
	if p.reg.recovery(req.Migration) {
		return p.refusePeer(raw, who.Node, req, reasonWrongState, fmt.Sprintf("%s names a recovery's streams: the migration it resumes is what is finished", req.Migration))
	}
	if !req.Cancelled && p.reg.notStarted(req.Migration, req.Domain, owner) {
		// libvirt's Finish would wait for a migration that never came,
		// holding its job and this node's shutdown.
		return p.refusePeer(raw, who.Node, req, reasonNotStarted, fmt.Sprintf("migration %s has relayed no stream: nothing to finish (cancel it)", req.Migration))
	}
	e, resp, ok := p.claimFinish(raw, c, req, who)
	if !ok {
		return resp
	}
	// No deadline of Ferry's own: libvirt's Finish ends with the
	// migration, and cutting it in post-copy would split the guest's
	// memory (KubeVirt never times post-copy out either). Only the
	// migration's end (shutdown, unregister) cuts the wait, never
	// libvirt's job; a repeat then learns the outcome from libvirt.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !p.reg.setStopFinish(e, func() { cancel(); c.Close() }) {
		cancel()
	}
	// Nothing is read from the source meanwhile; the answer's write has
	// its own deadline.
	c.SetDeadline(time.Time{})
	start := time.Now()
	var in peer.IncomingMigration
	var cookie []byte
	var outcome string
	var err error
	if e.in != nil {
		in = p.reg.incomingOf(e)
		cookie, outcome, err = p.finishLibvirt(ctx, e, in, req, owner)
	}
	counters := e.counters.Snapshot()
	why := "finished"
	if req.Cancelled {
		why = "finished as cancelled by the source"
	}
	if err != nil {
		why = "finish failed: " + err.Error()
		// libvirt answers a cancelled Finish with an error too.
		level := zap.WarnLevel
		if req.Cancelled {
			level = zap.InfoLevel
		}
		p.log.Log(level, "incoming migration did not finish", zap.String("migration", req.Migration), zap.String("domain", req.Domain),
			zap.Bool("cancelled", req.Cancelled), zap.String("outcome", outcome), zap.Error(err), zap.Duration("took", time.Since(start)))
	}
	resp = peer.ControlResponse{Cookie: cookie, Counters: counters, Outcome: outcome}
	if err != nil {
		resp = peer.ControlResponse{Error: p.scrub(err.Error()), Counters: counters, Outcome: outcome}
	}
	if e.in != nil && outcome == peer.OutcomeRunning {
		resp.Persisted = p.persisted(in)
	}
	if outcome == peer.OutcomeRunning || outcome == peer.OutcomeStopped {
		// Whole on one node: nothing will resume it.
		p.dropMonitor(e.m.ID)
	}
	if outcome != "" || e.in == nil {
		// Only a settled answer is kept: an unsettled one (the wait cut
		// while libvirt's job still ran) is worked out again when asked.
		p.reg.setResult(e, resp)
		p.saveOutcome(e.m.ID, owner, e.m.Domain, in.Instance, &resp)
	}
	// Its own end must not cut the connection that carries the answer.
	p.reg.setStopFinish(e, cancel)
	if outcome == peer.OutcomeSplit && e.in != nil && in.MonitorPath != "" {
		// libvirt may call a post-copy failed whose stream still moves:
		// its streams stay until the recovery pauses the target QEMU.
		p.log.Info("incoming post-copy split: its streams stay for its recovery", zap.String("migration", req.Migration), zap.String("domain", req.Domain))
		return resp
	}
	if err != nil && e.in != nil && in.PostCopy && outcome != peer.OutcomeStopped {
		p.log.Info("incoming post-copy's finish failed: its streams stay while QEMU moves them", zap.String("migration", req.Migration), zap.String("domain", req.Domain))
		p.unregisterOnceStill(e, req.Migration, why)
		return resp
	}
	if e.in != nil && in.PostCopy && outcome == peer.OutcomeRunning {
		// The target QEMU ends a post-copy by saying so to the source
		// over the stream, and libvirt's Finish here may return first:
		// cut now, the source QEMU would take its missing word for a
		// failure and start its own copy again.
		p.unregisterWhenStopped(e, req.Migration, why, drainCheck, 0, drainWait)
		return resp
	}
	p.Unregister(req.Migration, why)
	return resp
}

// claimFinish takes a prepared migration for its finish. A repeat (the
// first answer was lost on the way, the source's connection broke while
// libvirt's Finish ran, or this ferryd restarted since) is not claimed:
// the same peer hears the same truth.
func (p *Proxy) claimFinish(raw, c net.Conn, req peer.ControlRequest, who Peer) (*entry, peer.ControlResponse, bool) {
	owner := who.owner()
	e, err := p.reg.claim(req.Migration, req.Domain, owner, true, statePrepared, stateFinishing)
	if err == nil {
		return e, peer.ControlResponse{}, true
	}
	if resp, ok := p.reg.finishedResult(req.Migration, req.Domain, owner); ok {
		return nil, resp, false
	}
	if resp, ok := p.awaitFinish(c, req, owner); ok {
		return nil, resp, false
	}
	if resp, ok := p.recordedOutcome(raw, req, who); ok {
		return nil, resp, false
	}
	return nil, p.refusePeer(raw, who.Node, req, refusalReason(err, reasonWrongState), err.Error()), false
}

// finishLibvirt runs libvirt's Finish: its cookie for the source's
// Confirm, and whether the guest runs here (an outcome), or "" while that
// is not settled.
func (p *Proxy) finishLibvirt(ctx context.Context, e *entry, in peer.IncomingMigration, req peer.ControlRequest, owner string) ([]byte, string, error) {
	cancelled := req.Cancelled
	if !cancelled {
		// Kept before libvirt may hand the guest over: a ferryd that dies
		// during this Finish must not, once back, take a guest gone since
		// (powered off after it ran here) for one that never came. Without
		// it a pre-copy is not finished but cancelled: the source's copy,
		// still whole, runs on. A post-copy's source never runs again, so
		// there it is not needed to tell the two apart.
		if err := p.saveRecord(outcomeRecord{ID: e.m.ID, Owner: owner, Domain: e.m.Domain, Instance: in.Instance, Finishing: true}); err != nil && !in.PostCopy {
			p.log.Error("cancelling an incoming migration: its record cannot be kept before the guest is handed over", zap.String("migration", e.m.ID), zap.String("domain", e.m.Domain), zap.Error(err))
			cancelled = true
		}
	}
	cookie, err := p.cfg.Incoming.Finish(ctx, in, req.Cookie, cancelled)
	if cancelled && !req.Cancelled && err == nil {
		err = errors.New("this node cannot record the migration before handing the guest over (its state directory), so it dropped its copy")
	}
	if err == nil && !cancelled {
		// libvirt's Finish handed the guest over here: whatever it does
		// next (power off, crash), the source must never resume.
		return cookie, peer.OutcomeRunning, nil
	}
	return cookie, p.outcomeOf(in), err
}

// awaitFinish waits for the answer of a finish still running, for a repeat
// of it; false if there is none to wait for, or the wait was cut.
func (p *Proxy) awaitFinish(c net.Conn, req peer.ControlRequest, owner string) (peer.ControlResponse, bool) {
	cut := make(chan struct{})
	var once sync.Once
	e, ok := p.reg.finishing(req.Migration, req.Domain, owner, func() { once.Do(func() { close(cut) }) })
	if !ok {
		return peer.ControlResponse{}, false
	}
	c.SetDeadline(time.Time{})
	select {
	case <-e.resultReady:
	case <-cut:
	}
	return p.reg.resultOf(e)
}

// recordedOutcome answers a repeated finish from what this node kept (its
// registry's ended migrations, its outcome records across restarts) and,
// where no answer was kept, from libvirt: the domain running here, or not.
func (p *Proxy) recordedOutcome(raw net.Conn, req peer.ControlRequest, who Peer) (peer.ControlResponse, bool) {
	owner := who.owner()
	if p.reg.stillFinishing(req.Migration, req.Domain, owner) {
		// A repeat whose wait a newer one cut: the Finish still runs, and
		// its own answer is the one to give.
		return p.refusePeer(raw, who.Node, req, reasonUnsettled, fmt.Sprintf("migration %s is still finishing on this node: ask again", req.Migration)), true
	}
	in, known := p.reg.endedIncoming(req.Migration, req.Domain, owner)
	fromDisk, finishing := false, false
	if p.outcomes != nil {
		r, ok, err := p.outcomes.load(req.Migration)
		if err != nil {
			p.log.Warn("unreadable migration outcome record", zap.Error(err))
		}
		if ok && ownerMatches(r.Owner, owner) && r.Domain == req.Domain {
			if r.Result != nil {
				return *r.Result, true
			}
			if !known {
				in, known, fromDisk = peer.IncomingMigration{ID: r.ID, Domain: r.Domain, Instance: r.Instance}, true, true
			}
			finishing = r.Finishing
		}
	}
	if !known {
		return peer.ControlResponse{}, false
	}
	if req.Cancelled {
		// The source will not go on: a guest this node still holds for
		// the migration (a restart left it) is dropped first, so the
		// answer can settle it.
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout+30*time.Second)
		if err := p.cfg.Incoming.Cancel(ctx, in); err != nil {
			p.log.Info("a cancelled finish could not drop this node's copy yet", zap.String("migration", in.ID), zap.String("domain", in.Domain), zap.Error(err))
		}
		cancel()
	}
	outcome := p.outcomeOf(in)
	if outcome == "" {
		reason, since := reasonUnsettled, ""
		if fromDisk {
			reason, since = peer.ReasonRestarted, "; this node's ferryd restarted since the prepare"
		}
		return p.refusePeer(raw, who.Node, req, reason, fmt.Sprintf("the outcome of migration %s on this node is not settled yet (libvirt's job still runs, or libvirt is not reachable)%s: ask again", req.Migration, since)), true
	}
	if outcome == peer.OutcomeStopped && finishing {
		// libvirt's Finish was under way when this ferryd stopped: the
		// guest may have been handed over and be gone since. Only an
		// operator who has looked can tell.
		return p.refusePeer(raw, who.Node, req, peer.ReasonRestarted, fmt.Sprintf("migration %s: this node's ferryd restarted during libvirt's Finish, and the guest is not here now; whether it ran here first cannot be told (ferryctl resolve on the source)", req.Migration)), true
	}
	resp := peer.ControlResponse{Outcome: outcome}
	switch {
	case outcome == peer.OutcomeStopped && fromDisk:
		// Known only from its record: this ferryd restarted since the
		// prepare, and libvirt ended the incoming guest with the
		// connection that prepared it.
		resp.Error, resp.Reason = fmt.Sprintf("domain %s does not run on this node: its ferryd restarted since the prepare, and the incoming migration ended without it", req.Domain), peer.ReasonRestarted
	case outcome == peer.OutcomeStopped:
		resp.Error = fmt.Sprintf("domain %s does not run on this node: its incoming migration ended without it", req.Domain)
	case outcome == peer.OutcomeSplit:
		resp.Error = fmt.Sprintf("domain %s is held here by a failed post-copy: its memory is split between the two nodes", req.Domain)
	}
	if outcome == peer.OutcomeRunning {
		resp.Persisted = p.persisted(in)
	}
	p.saveOutcome(req.Migration, owner, req.Domain, in.Instance, &resp)
	return resp, true
}

// persisted asks libvirt, not this process's memory, whether the
// migration's guest is defined here: what a restart cannot lose.
func (p *Proxy) persisted(in peer.IncomingMigration) bool {
	if p.cfg.Incoming == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout+30*time.Second)
	defer cancel()
	return p.cfg.Incoming.Persisted(ctx, in)
}

// outcomeOf asks libvirt whether the migration's domain runs here.
func (p *Proxy) outcomeOf(in peer.IncomingMigration) string {
	if p.cfg.Incoming == nil {
		return "" // not settled: this ferryd cannot ask, as one restarted without a libvirt socket
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout+30*time.Second)
	defer cancel()
	out, err := p.cfg.Incoming.Outcome(ctx, in)
	if err != nil {
		p.log.Info("the outcome of an incoming migration is not settled", zap.String("migration", in.ID), zap.String("domain", in.Domain), zap.Error(err))
		return ""
	}
	return out
}

// saveOutcome records a migration, with its finish's answer once it has
// one; without a state directory nothing outlives this process.
func (p *Proxy) saveOutcome(id, owner, domain, instance string, result *peer.ControlResponse) error {
	return p.saveRecord(outcomeRecord{ID: id, Owner: owner, Domain: domain, Instance: instance, Result: result})
}

func (p *Proxy) saveRecord(r outcomeRecord) error {
	if p.outcomes == nil {
		return nil
	}
	r.Prepared = time.Now()
	err := p.outcomes.save(r)
	id := r.ID
	if err != nil {
		p.log.Warn("cannot record an incoming migration's outcome; a restart would not know it", zap.String("migration", id), zap.Error(err))
	}
	return err
}

func (p *Proxy) cancel(raw net.Conn, req peer.ControlRequest, who Peer) peer.ControlResponse {
	if p.reg.recovery(req.Migration) {
		return p.refusePeer(raw, who.Node, req, reasonWrongState, fmt.Sprintf("%s names a recovery's streams: there is nothing to cancel", req.Migration))
	}
	e, err := p.reg.claim(req.Migration, req.Domain, who.owner(), true, statePrepared, stateFinishing)
	if err != nil {
		return p.refusePeer(raw, who.Node, req, refusalReason(err, reasonWrongState), err.Error())
	}
	if e.in != nil {
		p.cancelLibvirt(p.reg.incomingOf(e), "cancelled by the source")
	}
	p.dropMonitor(e.m.ID)
	counters := e.counters.Snapshot()
	p.Unregister(req.Migration, "cancelled by the source")
	return peer.ControlResponse{Counters: counters}
}

// streamEnded forgets a relayed connection; when it was the migration's
// last, the source's finish should follow at once, and if it does not the
// migration is dropped.
func (p *Proxy) streamEnded(e *entry, c net.Conn) {
	p.reg.untrack(e, c)
	if e.in == nil || !p.reg.idle(e) {
		return
	}
	p.reg.addTimer(e, p.cfg.FinishWait, func() {
		if p.reg.idle(e) {
			p.dropIncoming(e.m.ID, fmt.Sprintf("its streams ended and no finish came within %v", p.cfg.FinishWait))
		}
	})
}

// dropIncoming ends a prepared migration nobody will finish, telling
// libvirt first; one already finishing is left to its finish.
func (p *Proxy) dropIncoming(id, why string) bool {
	e, err := p.reg.setState(id, "", statePrepared, stateFinishing)
	if err != nil {
		return false
	}
	p.log.Warn("dropping an incoming migration", zap.String("migration", id), zap.String("domain", e.m.Domain), zap.String("why", why))
	if e.in != nil {
		p.cancelLibvirt(p.reg.incomingOf(e), why)
	}
	p.dropMonitor(id)
	p.Unregister(id, why)
	return true
}

// heldRecheck is how often a migration kept past its time is looked at.
const heldRecheck = time.Minute

// held asks the Incoming whether e's migration must be kept.
func (p *Proxy) held(e *entry) (string, bool) {
	if p.cfg.Incoming == nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	return p.cfg.Incoming.Held(ctx, p.reg.incomingOf(e))
}

// cancelTimeout bounds libvirt's Finish with cancelled set: it only kills
// a QEMU.
const cancelTimeout = 30 * time.Second

func (p *Proxy) cancelLibvirt(in peer.IncomingMigration, why string) {
	if p.cfg.Incoming == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	if err := p.cfg.Incoming.Cancel(ctx, in); err != nil {
		p.log.Warn("libvirt did not take the cancel of an incoming migration", zap.String("migration", in.ID),
			zap.String("domain", in.Domain), zap.String("why", why), zap.Error(err))
	}
}

// Abandon drops those of the migrations ids that are still prepared, for
// a domain whose incoming job has ended, in case its source can no longer
// say so (link down, source gone). Those finishing are left to their
// finish. Only the job's own may be named: the same domain migrated here
// again meanwhile is another migration.
func (p *Proxy) Abandon(ids []string, why string) []string {
	var dropped []string
	for _, id := range ids {
		if p.dropIncoming(id, why) {
			dropped = append(dropped, id)
		}
	}
	return dropped
}

// dropAllPrepared tells libvirt to drop every prepared migration, in
// parallel, when the proxy that would have relayed them goes away.
func (p *Proxy) dropAllPrepared(why string) {
	var wg sync.WaitGroup
	for _, m := range p.reg.active() {
		if m.State != statePrepared {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.dropIncoming(m.ID, why)
		}()
	}
	wg.Wait()
}

// Register makes this node accept the streams of a migration whose
// libvirt side its caller runs itself (tests, benchmarks): memory in
// 1+parallel connections, disk in one if asked. Peers can only prepare.
func (p *Proxy) Register(id, domain string, parallel int, disk bool) (Migration, error) {
	m := p.newIncoming(id, domain, parallel, false, disk, p.cfg.RegistrationTTL)
	m.State = statePrepared
	if err := p.reg.add(m, nil, ""); err != nil {
		return m, err
	}
	p.log.Info("migration registered", zap.String("migration", id), zap.String("domain", domain))
	return m, nil
}

// Unregister ends a migration on the target side, cuts its connections and
// removes the target QEMU's sockets, which live in this proxy's directory
// and outlive a failed incoming migration.
func (p *Proxy) Unregister(id, why string) *Counters {
	e, ok := p.reg.end(id, why)
	if !ok {
		return nil
	}
	for _, path := range e.m.Targets {
		os.Remove(path)
	}
	p.log.Info("incoming migration ended", zap.String("migration", id), zap.String("domain", e.m.Domain), zap.String("peerNode", e.m.PeerNode), zap.String("why", why))
	return e.counters
}

func refusalReason(err error, def string) string {
	var r *peer.Refusal
	var re *regError
	switch {
	case errors.As(err, &r):
		return r.Reason
	case errors.As(err, &re):
		return re.reason
	case errors.Is(err, peer.ErrShuttingDown):
		return peer.ReasonShuttingDown
	}
	return def
}

// scrub takes this node's private paths out of text bound for a peer: a
// peer learns why, never where.
func (p *Proxy) scrub(s string) string {
	for _, priv := range p.private {
		if priv != "" {
			s = strings.ReplaceAll(s, priv, "<local>")
		}
	}
	return s
}
