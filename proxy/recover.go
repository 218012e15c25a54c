package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// A post-copy migration whose streams broke is paused by QEMU on both
// nodes (OutcomeSplit), and can go on over fresh streams: the source asks
// for one with OpRecover, each attempt anew, and once QEMU has completed
// asks with OpRecovered what became of the guest.
const (
	OpRecover   = "recover"   // have the paused target QEMU listen on a fresh stream
	OpRecovered = "recovered" // say whether the guest runs whole here after a recovery
)

// ErrGuestGone: an Incoming's word that the migration's guest is
// no longer here, so that no attempt can ever resume it.
var ErrGuestGone = errors.New("the migration's guest is no longer on this node")

// TargetMonitorPath is where the target QEMU of a post-copy migration
// creates Ferry's own QMP monitor on this node, beside the migration's
// sockets; the proxy then moves it (see HiddenMonitorPath).
func TargetMonitorPath(dir, id string) string {
	return filepath.Join(dir, id+"-qmp.sock")
}

// QEMUCompleted is QEMU's word for a migration that has moved every page
// (query-migrate's "completed").
const QEMUCompleted = "completed"

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
func (p *Proxy) splitIncoming(req ControlRequest, owner string) (IncomingMigration, bool) {
	if in, ok := p.reg.finishingIncoming(req.Migration, req.Domain, owner); ok && in.PostCopy && in.MonitorPath != "" {
		in.MonitorPath = HiddenMonitorPath(p.cfg.SocketDir, in.ID)
		return in, true
	}
	if p.outcomes == nil {
		// Without a state dir, what this process's registry kept.
		in, resp, ok := p.reg.answeredIncoming(req.Migration, req.Domain, owner)
		if !ok || !in.PostCopy || (resp.Outcome != OutcomeSplit && resp.Outcome != OutcomeRunning) {
			return IncomingMigration{}, false
		}
		in.MonitorPath = HiddenMonitorPath(p.cfg.SocketDir, in.ID)
		return in, resp.Outcome == OutcomeSplit
	}
	r, ok, err := p.outcomes.load(req.Migration)
	if err != nil || !ok || !ownerMatches(r.Owner, owner) || r.Domain != req.Domain {
		return IncomingMigration{}, false
	}
	in := IncomingMigration{ID: r.ID, Domain: r.Domain, Instance: r.Instance, PostCopy: true,
		MonitorPath: HiddenMonitorPath(p.cfg.SocketDir, r.ID)}
	if r.Result == nil && r.Finishing {
		// This ferryd restarted during the finish, and no source has asked
		// since: libvirt says how the finish left the guest.
		if p.outcomeOf(in) != OutcomeSplit {
			return IncomingMigration{}, false
		}
		resp := ControlResponse{Outcome: OutcomeSplit, Reason: ReasonRestarted,
			Error: fmt.Sprintf("domain %s is held here by a failed post-copy: its memory is split between the two nodes", r.Domain)}
		p.saveOutcome(r.ID, owner, r.Domain, r.Instance, &resp)
		return in, true
	}
	if r.Result == nil || r.Result.Outcome != OutcomeSplit && r.Result.Outcome != OutcomeRunning {
		return IncomingMigration{}, false
	}
	return in, r.Result.Outcome == OutcomeSplit
}

// HeldIncoming lists the incoming migrations this node's records say a
// broken post-copy may hold here: split, or finishing when the ferryd
// before this one stopped; of each domain only its latest migration.
// However old: a recovery waits for its operator as long as it takes.
// The caller asks libvirt which are still held.
func (p *Proxy) HeldIncoming() []IncomingMigration {
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
	var out []IncomingMigration
	for _, r := range latest {
		if r.Result != nil && r.Result.Outcome == OutcomeSplit || r.Result == nil && r.Finishing {
			out = append(out, IncomingMigration{ID: r.ID, Domain: r.Domain, Instance: r.Instance, PostCopy: true,
				MonitorPath: HiddenMonitorPath(p.cfg.SocketDir, r.ID)})
		}
	}
	return out
}

// recoveryOf finds the post-copy req names, prepared here by peer, and
// whether it is split; or the refusal to answer.
func (p *Proxy) recoveryOf(raw net.Conn, req ControlRequest, peer Peer) (Incoming, IncomingMigration, bool, *ControlResponse) {
	rc := p.cfg.Incoming
	if rc == nil {
		r := p.refusePeer(raw, peer.Node, req, reasonIncomingDisabled, "this node does not recover post-copy migrations")
		return nil, IncomingMigration{}, false, &r
	}
	in, split := p.splitIncoming(req, peer.owner())
	if in.ID == "" {
		r := p.refusePeer(raw, peer.Node, req, ReasonUnknownMigration, fmt.Sprintf("migration %s of %s is not a post-copy this node holds for this peer", req.Migration, req.Domain))
		return nil, IncomingMigration{}, false, &r
	}
	return rc, in, split, nil
}

// recover readies one attempt: a fresh stream, registered for the peer
// that prepared the migration, and the target QEMU listening behind it.
func (p *Proxy) recover(raw net.Conn, req ControlRequest, peer Peer) ControlResponse {
	rc, in, split, refused := p.recoveryOf(raw, req, peer)
	if refused != nil {
		return *refused
	}
	if !split {
		return ControlResponse{Outcome: OutcomeRunning}
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
	m := Migration{ID: rid, Domain: in.Domain, State: statePrepared, Expires: time.Now().Add(recoveryTTL), PeerNode: peer.Node, RecoveryOf: in.ID,
		Targets: map[Kind]string{KindMemory: TargetSocketPath(p.cfg.SocketDir, rid, KindMemory)},
		// The main channel, then post-copy's preempt channel.
		Limits: map[Kind]int{KindMemory: 2}}
	// No libvirt side of its own: its streams ending cancels nothing.
	if err := p.reg.add(m, nil, peer.owner()); err != nil {
		return p.refusePeer(raw, peer.Node, req, refusalReason(err, reasonWrongState), err.Error())
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
	status, err := rc.Recover(ctx, in, m.Targets[KindMemory])
	if errors.Is(err, ErrGuestGone) {
		p.Unregister(rid, "the guest is gone")
		return p.refusePeer(raw, peer.Node, req, ReasonGuestGone, "recovery: "+err.Error())
	}
	if err != nil {
		p.Unregister(rid, "recovery not armed")
		p.log.Warn("a post-copy recovery could not be armed", zap.String("migration", in.ID), zap.String("domain", in.Domain), zap.Error(err))
		return ControlResponse{Error: p.scrub("recovery: " + err.Error())}
	}
	if status == QEMUCompleted {
		// QEMU here has every page already (the break came after the
		// last one): no stream to hand out; the source asks what libvirt
		// made of it (OpRecovered).
		p.Unregister(rid, "QEMU here completed the migration")
		p.log.Info("a post-copy recovery found the migration completed here", zap.String("migration", in.ID), zap.String("domain", in.Domain))
		return ControlResponse{Outcome: OutcomeRunning}
	}
	// QEMU here listens on the fresh stream: the migration's own are done.
	p.Unregister(in.ID, "resumed over fresh streams")
	p.log.Info("post-copy recovery armed", zap.String("migration", in.ID), zap.String("domain", in.Domain), zap.String("stream", rid),
		zap.String("qemu", status), zap.String("peerNode", peer.Node))
	return ControlResponse{Migration: rid}
}

// recovered answers what became of a recovered migration's guest, and
// keeps the answer in place of the split one once it runs whole here.
func (p *Proxy) recovered(raw net.Conn, req ControlRequest, peer Peer) ControlResponse {
	rc, in, split, refused := p.recoveryOf(raw, req, peer)
	if refused != nil {
		return *refused
	}
	owner := peer.owner()
	if !split {
		// Answered before (the answer lost on its way): the same answer.
		if resp, ok := p.reg.finishedResult(req.Migration, req.Domain, owner); ok && resp.Outcome == OutcomeRunning {
			return resp
		}
		if p.outcomes != nil {
			if r, ok, _ := p.outcomes.load(req.Migration); ok && ownerMatches(r.Owner, owner) && r.Result != nil && r.Result.Outcome == OutcomeRunning {
				return *r.Result
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	outcome, persisted, err := rc.Recovered(ctx, in)
	if err != nil {
		return p.refusePeer(raw, peer.Node, req, reasonUnsettled, fmt.Sprintf("the outcome of migration %s on this node is not settled yet: %v", req.Migration, err))
	}
	resp := ControlResponse{Outcome: outcome, Persisted: persisted}
	if outcome == OutcomeRunning {
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
