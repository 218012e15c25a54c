package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/internal/peertext"
	"github.com/ferry-vm/ferry/peer"
)

// What this proxy holds for peers at once, and how much of an answer it
// reads.
const (
	// maxReservedExtra is what a finish or a cancel carries besides its
	// cookie (base64 makes it a third larger), on a kept connection.
	maxReservedExtra = 128 << 10
	// MaxControlConns and MaxIncoming bound what peers may hold at once:
	// control connections being served, and incoming migrations prepared
	// and not yet ended, each a target QEMU.
	MaxControlConns = 64
	MaxIncoming     = 16
	// MaxIncomingPerPeer is one peer's share of MaxIncoming (by
	// certificate; without TLS there is no telling peers apart).
	MaxIncomingPerPeer = 8
	// MaxOpeningConns bounds connections not yet past their header.
	MaxOpeningConns  = 1024
	maxControlAnswer = 1 << 20
)

// knownReason: a refusal's code is one this proxy's own peers send, e.g.
// domain_exists; any other a peer sends is unrecognised, so a code can no
// more steer a failure's class than the words after it.
func knownReason(r string) bool {
	return slices.Contains(rejectReasons, r) || r == peer.ReasonCPUIncompatible || r == peer.ReasonResumeByLibvirt
}

// maxPeerText bounds what a peer's answer may put into this node's records.
const maxPeerText = 512

var domainName = regexp.MustCompile(`^[^/\x00-\x1f]{1,255}$`)

// limitedReader is io.LimitedReader that remembers hitting its limit, so
// an oversized request is told apart from a malformed one.
type limitedReader struct {
	r   io.Reader
	n   int64
	hit bool
}

func (l *limitedReader) Read(b []byte) (int, error) {
	if l.n <= 0 {
		l.hit = true
		return 0, io.EOF
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.r.Read(b)
	l.n -= int64(n)
	return n, err
}

// serveControl reads one request within the header timeout, runs it (a
// finish may take as long as a post-copy migration: its own deadline
// bounds it) and answers. A reserved connection, past MaxControlConns,
// is served only for a peer with migrations prepared here, and only a
// finish or a cancel.
func (p *Proxy) serveControl(raw, c net.Conn, reserved bool) {
	defer c.Close()
	// Who asks comes first, before a byte of the request is read: a peer
	// this node does not take makes it allocate nothing, and hears nothing
	// about its request.
	who, reason, err := p.checkPeer(c)
	if err != nil {
		p.answer(c, peer.ControlRequest{}, p.refuseControl(raw, peer.ControlRequest{}, reason, err.Error()))
		return
	}
	who = p.plainPeer(who, raw)
	busy := fmt.Sprintf("more than %d control connections at once", MaxControlConns)
	if reserved {
		release, ok := p.takeReserve(who, raw)
		if !ok {
			p.answer(c, peer.ControlRequest{}, p.refuseControl(raw, peer.ControlRequest{}, reasonTooManyControls, busy))
			return
		}
		defer release()
	}
	releaseSlot, err := p.takeControlSlot(who, raw)
	if err != nil {
		p.answer(c, peer.ControlRequest{}, p.refuseControl(raw, peer.ControlRequest{}, reasonTooManyFromPeer, err.Error()))
		return
	}
	defer releaseSlot()
	c.SetReadDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	limit := int64(peer.MaxControlRequest)
	if reserved {
		// A finish or a cancel: a cookie and a few names.
		limit = peer.MaxCookie + maxReservedExtra
	}
	lr := &limitedReader{r: c, n: limit}
	// A request past readGate (a prepare's domain XML) waits for a reading
	// slot; a finish or a cancel is smaller and never waits.
	gr := &gatedReader{r: lr, acquire: func() (func(), error) {
		if reserved {
			// Bounded to a finish's size already, and kept for it.
			return func() {}, nil
		}
		release, err := p.startReading(who, raw, time.Now().Add(p.cfg.HeaderTimeout))
		if err == nil {
			// The wait is not the peer's: it gets its whole time to send.
			c.SetReadDeadline(time.Now().Add(p.cfg.HeaderTimeout))
		}
		return release, err
	}}
	defer gr.release()
	dec := json.NewDecoder(gr)
	dec.DisallowUnknownFields()
	var req peer.ControlRequest
	var resp peer.ControlResponse
	if err := dec.Decode(&req); err != nil {
		reason := reasonMalformedRequest
		var ne net.Error
		switch {
		case errors.Is(err, errBusyReading):
			reason = reasonTooManyReading
		case lr.hit:
			reason = reasonTooLarge
			err = fmt.Errorf("control request larger than %d bytes", limit)
		case errors.As(err, &ne) && ne.Timeout():
			reason = "header_timeout"
		}
		gr.release()
		resp = p.refuseControl(raw, req, reason, "control request: "+err.Error())
	} else {
		gr.release()
		c.SetReadDeadline(time.Time{})
		// Read: what is served next is bounded by its own caps (a prepare
		// by MaxIncoming, a finish by its migration), and a finish must not
		// wait behind the peer's prepares. A prepare keeps the slot until
		// its XML is checked: a peer's requests read and waiting to be
		// checked stay within its share.
		if req.Op != peer.OpPrepare {
			releaseSlot()
		}
		if reserved && req.Op != peer.OpFinish && req.Op != peer.OpCancel && req.Op != peer.OpResumed {
			resp = p.refuseControl(raw, req, reasonTooManyControls, busy+" (the rest are kept for finishes)")
		} else {
			resp = p.control(raw, c, req, who, releaseSlot)
		}
	}
	p.answer(c, req, resp)
}

func (p *Proxy) answer(c net.Conn, req peer.ControlRequest, resp peer.ControlResponse) {
	if req.Op == peer.OpFinish && faults.Inject(faults.DropFinishAnswer) {
		p.log.Warn("fault injected: the finish's answer is dropped", zap.String("migration", req.Migration))
		c.Close()
		return
	}
	c.SetWriteDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	if err := json.NewEncoder(c).Encode(resp); err != nil && req.Op == peer.OpPrepare && resp.Error == "" {
		// The source never hears that the target is ready; it will not
		// perform, so nothing would ever finish this one.
		p.dropIncoming(resp.Migration, "the source did not take the prepare answer: "+err.Error())
	}
}

// control serves one request; checked gives the peer's control slot back
// once a prepare's XML is checked (see serveControl).
func (p *Proxy) control(raw, c net.Conn, req peer.ControlRequest, who Peer, checked func()) peer.ControlResponse {
	defer checked()
	switch req.Op {
	case peer.OpPrepare, peer.OpFinish, peer.OpCancel, peer.OpRecover, peer.OpRecovered, peer.OpResumed:
	default:
		return p.refuseControl(raw, req, reasonUnknownOp, fmt.Sprintf("unknown control op %q (prepare, finish, cancel, recover, recovered or resumed)", req.Op))
	}
	if err := peer.ValidID(req.Migration); err != nil {
		return p.refuseControl(raw, req, reasonInvalidID, err.Error())
	}
	if !domainName.MatchString(req.Domain) {
		return p.refuseControl(raw, req, reasonInvalidDomain, fmt.Sprintf("domain name %q is empty, too long or has a slash or control character", req.Domain))
	}
	if len(req.Cookie) > peer.MaxCookie {
		return p.refuseControl(raw, req, reasonMalformedRequest, fmt.Sprintf("cookie of %d bytes is over %d", len(req.Cookie), peer.MaxCookie))
	}
	switch req.Op {
	case peer.OpPrepare:
		return p.prepare(raw, c, req, who, checked)
	case peer.OpFinish:
		return p.finish(raw, c, req, who)
	case peer.OpRecover:
		return p.recover(raw, req, who)
	case peer.OpRecovered:
		return p.recovered(raw, req, who)
	case peer.OpResumed:
		return p.resumed(raw, req, who)
	default:
		return p.cancel(raw, req, who)
	}
}

// newMigrationID is the target's id for a migration it prepares: 128
// random bits, since whoever knows it may relay and end the migration.
func newMigrationID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("no randomness for a migration id: " + err.Error())
	}
	return "m-" + hex.EncodeToString(b)
}

// refuseControl counts, logs and words a refusal; what goes back to the
// peer never names a local path.
func (p *Proxy) refuseControl(raw net.Conn, req peer.ControlRequest, reason, detail string) peer.ControlResponse {
	return p.refusePeer(raw, "", req, reason, detail)
}

// refusePeer is refuseControl for a request whose peer is known.
func (p *Proxy) refusePeer(raw net.Conn, peerNode string, req peer.ControlRequest, reason, detail string) peer.ControlResponse {
	p.metrics.reject(reason)
	p.log.Warn("proxy refused a control request", zap.String("reason", reason), zap.String("detail", detail),
		zap.String("op", req.Op), zap.String("migration", req.Migration), zap.String("domain", req.Domain),
		zap.String("peer", raw.RemoteAddr().String()), zap.String("peerNode", peerNode))
	return peer.ControlResponse{Error: p.scrub(detail), Reason: reason}
}

// Control sends one request to the proxy at addr and returns its answer.
// ctx bounds the whole exchange (the header timeout when it has no
// deadline) and cutting it closes the connection.
func (p *Proxy) Control(ctx context.Context, addr string, req peer.ControlRequest) (peer.ControlResponse, error) {
	return p.ControlTo(ctx, addr, "", req)
}

// ControlTo is Control to the one proxy whose owner key (a prepare's
// ControlResponse.Owner) is owner: a finish or cancel goes only to the
// proxy that prepared the migration, whatever else answers at addr.
func (p *Proxy) ControlTo(ctx context.Context, addr, owner string, req peer.ControlRequest) (peer.ControlResponse, error) {
	c, who, err := p.dialPeer(ctx, addr, owner, peer.Header{Kind: peer.KindControl})
	if err != nil {
		return peer.ControlResponse{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(p.cfg.HeaderTimeout)
	}
	c.SetDeadline(deadline)
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return peer.ControlResponse{}, fmt.Errorf("control request to %s: %w", addr, tlsAlert(c, err))
	}
	var resp peer.ControlResponse
	if err := json.NewDecoder(io.LimitReader(c, maxControlAnswer)).Decode(&resp); err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return peer.ControlResponse{}, fmt.Errorf("control answer from %s: %w", addr, err)
	}
	resp.PeerNode, resp.Owner = who.Node, who.owner()
	if !peer.KnownOutcome(resp.Outcome) {
		resp.Outcome = ""
	}
	if resp.Reason != "" && !knownReason(resp.Reason) {
		resp.Reason = "unrecognised"
	}
	if resp.Error != "" {
		// Every refusal carries a code, and the peer's own words, bound
		// for job records, logs, Events and terminals, are quoted as
		// theirs: nothing that classifies a failure reads them.
		resp.Error = peertext.Quote(resp.Error, maxPeerText)
		if resp.Reason == "" {
			resp.Reason = "unrecognised"
		}
		return resp, &peer.ControlError{Target: addr, Reason: resp.Reason, Msg: resp.Error}
	}
	return resp, nil
}

// tlsAlert: under TLS 1.3 a server that refuses the client's certificate
// says so after the client's handshake has finished, so the client's
// first write may fail with a bare reset while the alert that says why
// (an unknown authority, a bad certificate) waits to be read.
func tlsAlert(c net.Conn, err error) error {
	if _, ok := c.(*tls.Conn); !ok {
		return err
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, rerr := c.Read(make([]byte, 1)); rerr != nil && strings.Contains(rerr.Error(), "tls:") {
		return fmt.Errorf("%w (TLS: %v)", err, rerr)
	}
	return err
}

// SocketDir is where this node's migration sockets live.
func (p *Proxy) SocketDir() string { return p.cfg.SocketDir }
