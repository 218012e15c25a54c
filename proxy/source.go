package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/peer"
)

// SourceMigration is the source side of one migration: a unix listener per
// stream, each accepted connection relayed to the target node's proxy.
type SourceMigration struct {
	ID       string
	Target   string
	Paths    map[peer.Kind]string
	Counters *Counters

	p *Proxy
	// qemu and daemon are the guest's QEMU and its libvirt daemon, the
	// non-root processes let connect.
	qemu, daemon int
	listeners    map[peer.Kind]net.Listener
	mu           sync.Mutex
	conns        map[net.Conn]struct{}
	// open counts the relays open per stream; started says one was, so
	// once the node is shutting down this is a migration in flight to let
	// finish, not a new one.
	open    [4]int
	started bool
	// performing: a direct migration whose Perform runs, in flight with no
	// stream here; onCut aborts it when a shutdown cuts it.
	performing bool
	onCut      func()
	closed     string
	wg         sync.WaitGroup
	errs       []string
	// node is the target node that prepared the migration, as its
	// certificate named it: streams go to that node only.
	node string
}

// BindTarget makes the migration's streams go only to the proxy that
// answered its prepare (ControlResponse.Owner): the node its certificate
// names, else that very certificate; nothing binds plain TCP.
func (s *SourceMigration) BindTarget(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.node = owner
}

// Owner is the owner key BindTarget was given.
func (s *SourceMigration) Owner() string { return s.targetNode() }

func (s *SourceMigration) targetNode() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// OpenSource creates the source-side sockets of a migration whose guest
// runs in QEMU process qemu, under the libvirt daemon process daemon (0 if
// unknown): only those two, or a root process, may connect to them (a
// daemon connects QEMU's main channel itself and hands QEMU the
// descriptor, and a session daemon is no root). A sibling QEMU of the
// same uid that connects first is refused, never relayed.
func (p *Proxy) OpenSource(id, target string, kinds []peer.Kind, qemu, daemon int) (*SourceMigration, error) {
	if err := peer.ValidID(id); err != nil {
		return nil, err
	}
	if why := p.closingReason(); why != "" {
		return nil, p.refuseSource(id, why)
	}
	gid, err := p.socketGroup()
	if err != nil {
		return nil, fmt.Errorf("source sockets: %w", err)
	}
	s := &SourceMigration{ID: id, Target: target, Paths: map[peer.Kind]string{}, Counters: &Counters{}, qemu: qemu, daemon: daemon,
		p: p, listeners: map[peer.Kind]net.Listener{}, conns: map[net.Conn]struct{}{}}
	// Named by an id of this node's own, never the target's: the names
	// show in /proc/net/unix, and the target's id is what a peer is
	// known by over plain TCP.
	local := localSourceName()
	for _, k := range kinds {
		path := SocketPath(p.cfg.SocketDir, local, k)
		os.Remove(path) // a stale socket of a crashed run; the id is fresh
		ln, err := net.Listen("unix", path)
		if err != nil {
			s.Close("setup failed")
			return nil, fmt.Errorf("source socket for the %s stream: %w", k, err)
		}
		if err := giveSourceSocket(path, gid); err != nil {
			ln.Close()
			s.Close("setup failed")
			return nil, fmt.Errorf("source socket for the %s stream: %w", k, err)
		}
		s.Paths[k] = path
		s.listeners[k] = ln
	}
	p.mu.Lock()
	if why := p.closing; why != "" {
		p.mu.Unlock()
		s.Close(why)
		return nil, p.refuseSource(id, why)
	}
	if _, dup := p.sources[id]; dup {
		p.mu.Unlock()
		s.Close("duplicate")
		return nil, fmt.Errorf("migration %s already has source sockets", id)
	}
	p.sources[id] = s
	p.mu.Unlock()
	for k, ln := range s.listeners {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.accept(k, ln)
		}()
	}
	return s, nil
}

func (s *SourceMigration) accept(k peer.Kind, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if err := checkPeerPID(c, []int{s.qemu, s.daemon}, true, fmt.Sprintf("the %s socket of migration %s", k, s.ID)); err != nil {
			s.p.log.Warn("refused a connection to a source socket", zap.Error(err))
			s.p.metrics.reject("local_peer_not_qemu")
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.forward(k, c)
		}()
	}
}

// forward dials the target proxy for one accepted stream connection and
// relays it.
func (s *SourceMigration) forward(k peer.Kind, local net.Conn) {
	p := s.p
	ok, refusal := s.begin(k, local)
	if refusal != "" {
		s.fail(fmt.Sprintf("%s stream: %s", k, refusal))
		p.refuse(peer.ReasonShuttingDown, refusal, "local "+k.String()+" socket")
	}
	if !ok {
		local.Close()
		return
	}
	defer s.finish(k, local)
	start := time.Now()
	remote, _, err := p.dialPeer(context.Background(), s.Target, s.targetNode(), peer.Header{Kind: k, ID: s.ID})
	if err != nil {
		s.fail(fmt.Sprintf("%s stream: %v", k, err))
		p.log.Warn("cannot reach the target proxy", zap.String("migration", s.ID), zap.String("stream", k.String()), zap.String("target", s.Target), zap.Error(err))
		local.Close()
		return
	}
	p.metrics.dialed("peer", start)
	if !s.track(remote) {
		remote.Close()
		local.Close()
		return
	}
	defer s.untrack(remote)
	s.Counters.Conns[k].Add(1)
	defer p.metrics.open(k, "source")()
	err = relay(local, remote, p.metrics.counter(k, true, s.Counters), p.metrics.counter(k, false, s.Counters))
	if err != nil && !isClosed(err) {
		s.fail(fmt.Sprintf("%s stream broke: %v", k, err))
		p.log.Info("relay ended with an error", zap.String("migration", s.ID), zap.String("stream", k.String()), zap.Error(err))
	}
}

// dialPeer connects to a peer proxy, secures it, sends the header and waits
// for the peer's answer; the returned connection is ready to relay.
// want, when set, is the node the target's certificate must name.
func (p *Proxy) dialPeer(ctx context.Context, addr, want string, h peer.Header) (net.Conn, Peer, error) {
	hb, err := h.Encode()
	if err != nil {
		return nil, Peer{}, err
	}
	if want != "" && p.tls == nil {
		return nil, Peer{}, fmt.Errorf("target proxy %s: a migration bound to the %s needs TLS to tell it", addr, ownerName(want))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	raw, err := p.dialTCP(ctx, addr)
	if err != nil {
		return nil, Peer{}, fmt.Errorf("dial target proxy %s: %w", addr, err)
	}
	c := raw
	if deadline, ok := ctx.Deadline(); ok {
		raw.SetDeadline(deadline)
	}
	var who Peer
	if p.tls != nil {
		tc := tls.Client(&wire{Conn: raw}, p.tls.clientConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, Peer{}, fmt.Errorf("TLS with target proxy %s: %w", addr, err)
		}
		if who, _, err = p.checkPeer(tc); err != nil {
			tc.Close()
			return nil, Peer{}, fmt.Errorf("target proxy %s: %w", addr, err)
		}
		if want != "" && who.owner() != want {
			tc.Close()
			return nil, Peer{}, &WrongPeerError{Addr: addr, Got: who.String(), Want: ownerName(want)}
		}
		c = tc
	}
	if _, err := c.Write(hb); err != nil {
		c.Close()
		return nil, Peer{}, fmt.Errorf("header to target proxy %s: %w", addr, err)
	}
	if h.Kind != peer.KindControl {
		if err := peer.ReadStatus(c); err != nil {
			c.Close()
			return nil, Peer{}, err
		}
	}
	raw.SetDeadline(time.Time{})
	return c, who, nil
}

// WrongPeerError: the proxy at a target's address is not the one a
// migration is bound to.
type WrongPeerError struct{ Addr, Got, Want string }

func (e *WrongPeerError) Error() string {
	return fmt.Sprintf("target proxy %s is %s, not the %s that prepared the migration", e.Addr, e.Got, e.Want)
}

// NodeOwner is the owner key of the proxy whose certificate names node.
func NodeOwner(node string) string { return "node:" + node }

// ownerName words an owner key for an error.
func ownerName(owner string) string {
	if n, ok := strings.CutPrefix(owner, "node:"); ok {
		return "node " + n
	}
	return "certificate"
}

// begin records a relay of stream k; once the node is shutting down it
// refuses the first relay of a migration, which would start a new one.
func (s *SourceMigration) begin(k peer.Kind, local net.Conn) (bool, string) {
	closing := s.p.closingReason()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed != "":
		return false, ""
	case closing != "" && !s.started:
		return false, fmt.Sprintf("%s: migration %s had not started and is not let out", closing, s.ID)
	}
	s.conns[local] = struct{}{}
	s.open[k]++
	s.started = true
	return true, ""
}

// PerformDirect marks a direct migration's Perform as under way: its
// stream goes straight between the QEMUs, yet a shutdown waits for it as
// for a relayed one and, past its grace, cuts it by calling cut (which
// aborts libvirt's job, as a cut stream fails a relayed one). false: the
// node is shutting down, and it is not let out.
func (s *SourceMigration) PerformDirect(cut func()) bool {
	closing := s.p.closingReason()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != "" || closing != "" {
		return false
	}
	s.performing, s.onCut, s.started = true, cut, true
	return true
}

// Performed ends what PerformDirect began.
func (s *SourceMigration) Performed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.performing, s.onCut = false, nil
}

func (s *SourceMigration) finish(k peer.Kind, local net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, local)
	s.open[k]--
}

func (s *SourceMigration) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != "" {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *SourceMigration) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

func (s *SourceMigration) fail(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 16 {
		s.errs = append(s.errs, msg)
	}
}

// Errors are the relay failures seen so far, to explain a failed migration.
func (s *SourceMigration) Errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

// Close removes the sockets, cuts every relayed connection and waits for
// the relays to end. It is safe to call more than once.
func (s *SourceMigration) Close(why string) {
	s.mu.Lock()
	if s.closed != "" {
		s.mu.Unlock()
		return
	}
	s.closed = why
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	cut := s.onCut
	s.mu.Unlock()
	if cut != nil {
		cut()
	}
	for k, ln := range s.listeners {
		ln.Close()
		os.Remove(s.Paths[k])
	}
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	s.p.mu.Lock()
	if s.p.sources[s.ID] == s {
		delete(s.p.sources, s.ID)
	}
	s.p.mu.Unlock()
}

// sourceNonce and sourceSeq name source sockets: unique while this ferryd
// runs, and apart from a previous run's, which a crash may have left.
var (
	sourceNonce = rand.Uint32() & 0xffff
	sourceSeq   atomic.Uint64
)

// localSourceName names a migration's source sockets, short enough for
// a socket path.
func localSourceName() string {
	return fmt.Sprintf("s%04x-%d", sourceNonce, sourceSeq.Add(1))
}
