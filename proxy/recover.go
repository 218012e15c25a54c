package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/peer"
)

// TargetMonitorPath is where the target QEMU of a post-copy migration
// creates Ferry's own QMP monitor on this node, beside the migration's
// sockets; the proxy then moves it (see HiddenMonitorPath).
func TargetMonitorPath(dir, id string) string {
	return filepath.Join(dir, id+"-qmp.sock")
}

// maxRecoverSeconds caps how long a source may say it resumes.
const maxRecoverSeconds = 24 * 60 * 60

// recoveryTTL is how long a recovery stream waits for the source's
// connections; the source asks anew for each attempt.
const recoveryTTL = 2 * time.Minute

// recoverTimeout bounds readying the target QEMU.
const recoverTimeout = 30 * time.Second

// splitIncoming is the migration req names, as this node recorded it, if
// it was prepared by peer and its finish left it split, or still runs (the
// target QEMU has not seen the break yet: a silent link).
func (p *Proxy) splitIncoming(req peer.ControlRequest, owner string) (peer.IncomingMigration, bool) {
	if in, ok := p.reg.finishingIncoming(req.Migration, req.Domain, owner); ok && in.PostCopy && in.MonitorPath != "" {
		in.MonitorPath = HiddenMonitorPath(p.cfg.SocketDir, in.ID)
		return in, true
	}
	if p.outcomes == nil {
		// Without a state dir, what this process's registry kept.
		in, resp, ok := p.reg.answeredIncoming(req.Migration, req.Domain, owner)
		if !ok || !in.PostCopy || (resp.Outcome != peer.OutcomeSplit && resp.Outcome != peer.OutcomeRunning) {
			return peer.IncomingMigration{}, false
		}
		in.MonitorPath = HiddenMonitorPath(p.cfg.SocketDir, in.ID)
		return in, resp.Outcome == peer.OutcomeSplit
	}
	r, ok, err := p.outcomes.load(req.Migration)
	if err != nil || !ok || !ownerMatches(r.Owner, owner) || r.Domain != req.Domain {
		return peer.IncomingMigration{}, false
	}
	in := peer.IncomingMigration{ID: r.ID, Domain: r.Domain, Instance: r.Instance, PostCopy: true,
		MonitorPath: HiddenMonitorPath(p.cfg.SocketDir, r.ID), LibvirtResume: r.LibvirtResume}
	if r.Result == nil && r.Finishing {
		// This ferryd restarted during the finish, and no source has asked
		// since: libvirt says how the finish left the guest.
		if p.outcomeOf(in) != peer.OutcomeSplit {
			return peer.IncomingMigration{}, false
		}
		resp := peer.ControlResponse{Outcome: peer.OutcomeSplit, Reason: peer.ReasonRestarted,
			Error: fmt.Sprintf("domain %s is held here by a failed post-copy: its memory is split between the two nodes", r.Domain)}
		p.saveOutcome(r.ID, owner, r.Domain, r.Instance, &resp)
		return in, true
	}
	if r.Result == nil || r.Result.Outcome != peer.OutcomeSplit && r.Result.Outcome != peer.OutcomeRunning {
		return peer.IncomingMigration{}, false
	}
	return in, r.Result.Outcome == peer.OutcomeSplit
}

// HeldIncoming lists the incoming migrations this node's records say a
// broken post-copy may hold here: split, or finishing when the ferryd
// before this one stopped; of each domain only its latest migration.
// However old: a recovery waits for its operator as long as it takes.
// The caller asks libvirt which are still held.
func (p *Proxy) HeldIncoming() []peer.IncomingMigration {
	if p.outcomes == nil {
		return nil
	}
	// A split whose QEMU still listens on its monitor is the live one,
	// whatever the clock said when each record was written.
	listening := listeningUnixSockets()
	rank := func(r outcomeRecord) int {
		if listening[TargetMonitorPath(p.cfg.SocketDir, r.ID)] {
			return 1
		}
		return 0
	}
	latest := map[string]outcomeRecord{}
	for _, r := range p.outcomes.all() {
		l, ok := latest[r.Domain]
		if !ok || rank(r) > rank(l) || rank(r) == rank(l) && r.Prepared.After(l.Prepared) {
			latest[r.Domain] = r
		}
	}
	var out []peer.IncomingMigration
	for _, r := range latest {
		if r.Result != nil && r.Result.Outcome == peer.OutcomeSplit || r.Result == nil && r.Finishing {
			out = append(out, peer.IncomingMigration{ID: r.ID, Domain: r.Domain, Instance: r.Instance, PostCopy: true,
				MonitorPath: HiddenMonitorPath(p.cfg.SocketDir, r.ID), LibvirtResume: r.LibvirtResume})
		}
	}
	return out
}

// recoveryOf finds the post-copy req names, prepared here by peer, and
// whether it is split; or the refusal to answer.
func (p *Proxy) recoveryOf(raw net.Conn, req peer.ControlRequest, who Peer) (peer.Incoming, peer.IncomingMigration, bool, *peer.ControlResponse) {
	rc := p.cfg.Incoming
	if rc == nil {
		r := p.refusePeer(raw, who.Node, req, reasonIncomingDisabled, "this node does not recover post-copy migrations")
		return nil, peer.IncomingMigration{}, false, &r
	}
	in, split := p.splitIncoming(req, who.owner())
	if in.ID == "" {
		r := p.refusePeer(raw, who.Node, req, peer.ReasonUnknownMigration, fmt.Sprintf("migration %s of %s is not a post-copy this node holds for this peer", req.Migration, req.Domain))
		return nil, peer.IncomingMigration{}, false, &r
	}
	return rc, in, split, nil
}

// recover readies one attempt: a fresh stream, registered for the peer
// that prepared the migration, and the target QEMU listening behind it.
func (p *Proxy) recover(raw net.Conn, req peer.ControlRequest, who Peer) peer.ControlResponse {
	rc, in, split, refused := p.recoveryOf(raw, req, who)
	if refused != nil {
		return *refused
	}
	if !split {
		return peer.ControlResponse{Outcome: peer.OutcomeRunning}
	}
	// Its streams are checked against QEMU's group like any other: a
	// restarted ferryd may not know it yet, and must not relay unchecked.
	if _, err := p.socketGroup(); err != nil {
		p.log.Warn("cannot give QEMU the migration socket dir", zap.Error(err))
		return p.refuseControl(raw, req, refusalReason(err, reasonPrepareFailed), "recover: this node cannot check its QEMU's sockets (see its log)")
	}
	// One stream at a time: QEMU listens only where it was last told.
	for _, prev := range p.reg.recoveriesOf(in.ID) {
		p.Unregister(prev, "a newer recovery attempt")
	}
	rid := p.newID(fmt.Sprintf("%s-r%d", in.ID, p.recoveryN.Add(1)))
	m := Migration{ID: rid, Domain: in.Domain, State: statePrepared, Expires: time.Now().Add(recoveryTTL), PeerNode: who.Node, RecoveryOf: in.ID,
		Targets: map[peer.Kind]string{peer.KindMemory: TargetSocketPath(p.cfg.SocketDir, rid, peer.KindMemory)},
		// The main channel, then post-copy's preempt channel.
		Limits: map[peer.Kind]int{peer.KindMemory: 2}}
	// No libvirt side of its own: its streams ending cancels nothing.
	if err := p.reg.add(m, nil, who.owner()); err != nil {
		return p.refusePeer(raw, who.Node, req, refusalReason(err, reasonWrongState), err.Error())
	}
	// An attempt nobody follows through (its source gone) is dropped, so
	// the domain takes migrations again.
	if e, ok := p.reg.live(rid); ok {
		var expire func()
		expire = func() {
			if p.reg.hasStarted(e) && !p.reg.idle(e) {
				p.reg.addTimer(e, recoveryTTL, expire)
				return
			}
			p.Unregister(rid, fmt.Sprintf("no recovery stream within %v", recoveryTTL))
		}
		p.reg.addTimer(e, recoveryTTL, expire)
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	status, cookie, err := rc.Recover(ctx, in, m.Targets[peer.KindMemory], peer.Resume{ByLibvirt: req.LibvirtResume, Cookie: req.Cookie})
	if errors.Is(err, peer.ErrResumeByLibvirt) {
		// Not a refusal: the source begins libvirt's resume, and asks again.
		p.Unregister(rid, "resumed by libvirt's protocol")
		return peer.ControlResponse{Reason: peer.ReasonResumeByLibvirt, Error: err.Error()}
	}
	if errors.Is(err, peer.ErrGuestGone) {
		p.Unregister(rid, "the guest is gone")
		return p.refusePeer(raw, who.Node, req, peer.ReasonGuestGone, "recovery: "+err.Error())
	}
	if err != nil {
		p.Unregister(rid, "recovery not armed")
		p.log.Warn("a post-copy recovery could not be armed", zap.String("migration", in.ID), zap.String("domain", in.Domain), zap.Error(err))
		return peer.ControlResponse{Error: p.scrub("recovery: " + err.Error())}
	}
	if status == peer.QEMUCompleted {
		// QEMU here has every page already (the break came after the
		// last one): no stream to hand out; the source asks what libvirt
		// made of it (OpRecovered).
		p.Unregister(rid, "QEMU here completed the migration")
		p.log.Info("a post-copy recovery found the migration completed here", zap.String("migration", in.ID), zap.String("domain", in.Domain))
		return peer.ControlResponse{Outcome: peer.OutcomeRunning}
	}
	// QEMU here listens on the fresh stream: the migration's own are done.
	p.Unregister(in.ID, "resumed over fresh streams")
	p.log.Info("post-copy recovery armed", zap.String("migration", in.ID), zap.String("domain", in.Domain), zap.String("stream", rid),
		zap.String("qemu", status), zap.String("peerNode", who.Node))
	return peer.ControlResponse{Migration: rid, Cookie: cookie}
}

// resumed runs libvirt's Finish of a post-copy resumed by its own
// protocol; it answers once the migration has completed here, or broke
// again, however long that takes: the source's Confirm waits on it.
func (p *Proxy) resumed(raw net.Conn, req peer.ControlRequest, who Peer) peer.ControlResponse {
	rc, in, _, refused := p.recoveryOf(raw, req, who)
	if refused != nil {
		return *refused
	}
	// Cut with the resumed stream's end (a newer attempt, the guest
	// recovered, the proxy's own end): libvirt's job here goes back to
	// failed, never to a guest stopped.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, rid := range p.reg.recoveriesOf(in.ID) {
		if e, ok := p.reg.live(rid); ok {
			p.reg.setStopFinish(e, cancel)
		}
	}
	cookie, err := rc.Resumed(ctx, in, req.Cookie, req.Cancelled)
	if err != nil {
		return peer.ControlResponse{Error: p.scrub("resumed: " + err.Error())}
	}
	p.log.Info("libvirt finished the resumed post-copy here", zap.String("migration", in.ID), zap.String("domain", in.Domain))
	return peer.ControlResponse{Outcome: peer.OutcomeRunning, Cookie: cookie}
}

// recovered answers what became of a recovered migration's guest, and
// keeps the answer in place of the split one once it runs whole here.
func (p *Proxy) recovered(raw net.Conn, req peer.ControlRequest, who Peer) peer.ControlResponse {
	rc, in, split, refused := p.recoveryOf(raw, req, who)
	if refused != nil {
		return *refused
	}
	owner := who.owner()
	if !split {
		// Answered before (the answer lost on its way): the same answer.
		if resp, ok := p.reg.finishedResult(req.Migration, req.Domain, owner); ok && resp.Outcome == peer.OutcomeRunning {
			return resp
		}
		if p.outcomes != nil {
			if r, ok, _ := p.outcomes.load(req.Migration); ok && ownerMatches(r.Owner, owner) && r.Result != nil && r.Result.Outcome == peer.OutcomeRunning {
				return *r.Result
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	outcome, persisted, err := rc.Recovered(ctx, in)
	if err != nil {
		return p.refusePeer(raw, who.Node, req, reasonUnsettled, fmt.Sprintf("the outcome of migration %s on this node is not settled yet: %v", req.Migration, err))
	}
	resp := peer.ControlResponse{Outcome: outcome, Persisted: persisted}
	if outcome == peer.OutcomeRunning {
		p.reg.recovered(in.ID, resp)
		if p.outcomes != nil {
			if err := p.outcomes.recovered(in.ID, resp); err != nil {
				p.log.Warn("cannot record a recovered migration's outcome", zap.String("migration", in.ID), zap.Error(err))
			}
		}
		for _, rid := range p.reg.recoveriesOf(in.ID) {
			p.Unregister(rid, "recovered")
		}
		p.Unregister(in.ID, "recovered")
		p.dropMonitor(in.ID)
	}
	return resp
}
