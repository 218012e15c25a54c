package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/peer"
)

// Config configures a node's proxy.
type Config struct {
	// InboundSlots bounds the migrations prepared here and not ended, of
	// all peers together (0: MaxIncoming); a source past it waits its
	// turn (ReasonInboundBusy). A dry run takes none.
	InboundSlots int
	// Listen is the one TCP address every peer connects to, on the
	// migration network.
	Listen string
	// TLS enables mutual TLS between nodes; nil relays plain TCP (with
	// splice), for a trusted migration network only.
	TLS *TLSFiles
	// SocketDir holds this node's migration sockets: the source side's
	// listeners and, for incoming migrations, the target QEMU's, at paths
	// this node chooses.
	SocketDir string
	// SocketGroup returns the group QEMU runs with on this node (from
	// libvirt, or configured); the socket dir and the source sockets are
	// given to it the first time a migration needs them. nil keeps them
	// root's, for QEMU running as root.
	SocketGroup func(ctx context.Context) (int, error)
	// Incoming runs the target's side of Ferry-driven migrations on this
	// node's libvirt; nil refuses every prepare.
	Incoming peer.Incoming
	// OutcomeDir keeps each incoming migration's record and its finish's
	// answer across restarts; empty keeps them in memory only.
	OutcomeDir string
	// Private are local paths (libvirt sockets, say) never to be named in
	// an answer to a peer; SocketDir always is one.
	Private       []string
	HeaderTimeout time.Duration // for the TLS handshake and the header; default 5s
	DialTimeout   time.Duration // default 5s
	KeepAlive     time.Duration // TCP keepalive; default 15s
	// RegistrationTTL bounds how long an incoming migration may go on
	// before the target drops it, whatever deadline its source asked for;
	// default 24h.
	RegistrationTTL time.Duration
	// PrepareTimeout bounds libvirt's Prepare (a cold QEMU capabilities
	// cache takes 16 s on the test bed); default 90s.
	PrepareTimeout time.Duration
	// DirectPeers are the nodes whose migrations may come here on the
	// direct path: their QEMU straight to this node's, under QEMU's own
	// TLS with the certificates in QEMUTLSDir (libvirt's
	// migrate_tls_x509_cert_dir), issued by the CA of TLS. Empty: none.
	DirectPeers []string
	QEMUTLSDir  string
	// FirstStreamWait is how long a prepared migration waits for its first
	// data stream before it is dropped; default 2m.
	FirstStreamWait time.Duration
	// FinishWait is how long a prepared migration whose streams have all
	// closed waits for its source's finish before it is dropped: a source
	// cut off by the link cannot send it. Default 30s.
	FinishWait time.Duration
	// UserTimeout is TCP_USER_TIMEOUT on connections between proxies:
	// with no peer to ask, a migration link cut without a reset would
	// otherwise hold a stream for the kernel's 15 minutes of
	// retransmissions. Default 30s; a link back within it loses nothing.
	UserTimeout time.Duration
	// Node names this node in the refusals of a proxy shutting down;
	// default the hostname.
	Node string
	// Pod is this ferryd's pod, namespace/name, when its certificate names
	// the pod rather than the node.
	Pod string
	// ResolvePod finds the node a peer's pod runs on, for certificates
	// that name a pod; nil refuses them.
	ResolvePod func(ctx context.Context, namespace, pod string) (string, error)
	// SourceDomain names the domain of an outgoing migration for the
	// shutdown report, since OpenSource is not told it; optional.
	SourceDomain func(migrationID string) string
	Log          *zap.Logger
	// Metrics are the vectors the proxy counts into (package metrics
	// builds them); the zero value counts nothing.
	Metrics Metrics
}

func (c *Config) defaults() {
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = 5 * time.Second
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.RegistrationTTL <= 0 {
		c.RegistrationTTL = 24 * time.Hour
	}
	if c.PrepareTimeout <= 0 {
		c.PrepareTimeout = 90 * time.Second
	}
	if c.FirstStreamWait <= 0 {
		c.FirstStreamWait = 2 * time.Minute
	}
	if c.FinishWait <= 0 {
		c.FinishWait = 30 * time.Second
	}
	if c.UserTimeout <= 0 {
		c.UserTimeout = 30 * time.Second
	}
	if c.SocketDir == "" {
		c.SocketDir = "/run/ferry/migrationproxy"
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
}

// Proxy is one node's migration proxy: the listening port (target side and
// control) and the source-side sockets of its outgoing migrations.
type Proxy struct {
	cfg     Config
	log     *zap.Logger
	tls     *tlsSource
	metrics Metrics
	reg     *registry
	private []string // scrubbed from answers to peers

	mu      sync.Mutex
	ln      net.Listener
	sources map[string]*SourceMigration
	// closing is why new outgoing migrations are refused once the proxy
	// is shutting down.
	closing string
	wg      sync.WaitGroup

	stopOnce sync.Once
	stopped  chan struct{} // closed once everything is cut and the port closed
	stopErr  error

	controls atomic.Int32 // control connections being served
	// outcomes keeps incoming migrations' records on disk; nil without
	// Config.OutcomeDir.
	outcomes *outcomeStore
	// recoveryN numbers recovery attempts, for their streams' IDs.
	recoveryN atomic.Int64
	// controlBy counts them by peer while their requests are in progress.
	controlMu sync.Mutex
	controlBy map[string]int
	// reserveBy counts, by peer, the connections past MaxControlConns
	// kept for the finishes of its prepared migrations.
	reserveBy map[string]int
	// Connections still in their TLS handshake or header each hold a
	// goroutine until the header deadline: they are counted by where they
	// come from and by room (see opening.go).
	openingMu sync.Mutex
	openingBy map[openingKey][]*openingConn
	// openingRooms are the connections opening, oldest first: from
	// ephemeral ports, and from reserved ones (see openingKey).
	openingRooms [2][]*openingConn
	openingLog   logLimit
	portsLog     logLimit
	// noReservedPorts: this process may not bind a reserved port to dial
	// its peers from (see dialTCP).
	noReservedPorts atomic.Bool
	// reading are the turns to read a large control request, and checking
	// to have its domain XML checked.
	reading, checking turns

	groupMu sync.Mutex
	group   int // QEMU's group once the socket dir is given to it, else -1

	// newID names an incoming migration at prepare, from the source's
	// label; only tests replace the random one.
	newID func(label string) string
}

// New validates the configuration and loads the TLS files.
func New(cfg Config) (*Proxy, error) {
	cfg.defaults()
	p := &Proxy{cfg: cfg, log: cfg.Log, metrics: cfg.Metrics, reg: newRegistry(cfg.InboundSlots), sources: map[string]*SourceMigration{},
		stopped: make(chan struct{}), private: append([]string{cfg.SocketDir}, cfg.Private...), group: -1,
		newID: func(string) string { return newMigrationID() }}
	p.metrics.zeroReasons()
	if abs, err := filepath.Abs(cfg.SocketDir); err == nil && abs != cfg.SocketDir {
		p.private = append(p.private, abs)
	}
	if cfg.TLS != nil {
		s, err := newTLSSource(*cfg.TLS)
		if err != nil {
			return nil, err
		}
		p.tls = s
		if err := p.checkOwnIdentity(); err != nil {
			return nil, err
		}
	}
	if err := makeSocketDir(cfg.SocketDir); err != nil {
		return nil, fmt.Errorf("proxy socket dir %s: %w", cfg.SocketDir, err)
	}
	// The monitors' directory first: the sweep moves monitors into it.
	if err := makeMonitorDir(cfg.SocketDir); err != nil {
		return nil, fmt.Errorf("proxy QEMU monitor dir: %w", err)
	}
	removeStaleSockets(cfg.SocketDir, 10*time.Second, p.log)
	if err := monitorPathFits(cfg.SocketDir); err != nil {
		p.log.Warn("post-copy migrations this node receives cannot be resumed", zap.Error(err))
	}
	removeStaleMonitors(cfg.SocketDir, 0, p.log)
	if cfg.OutcomeDir != "" {
		s, err := openOutcomes(cfg.OutcomeDir)
		if err != nil {
			return nil, err
		}
		p.outcomes = s
	}
	return p, nil
}

// TLS reports whether peers are spoken to over mutual TLS.
func (p *Proxy) TLS() bool { return p.tls != nil }

// Listen opens the proxy port; Serve accepts on it.
func (p *Proxy) Listen() (net.Addr, error) {
	lc := net.ListenConfig{KeepAlive: p.cfg.KeepAlive, Control: p.tcpOptions}
	ln, err := lc.Listen(context.Background(), "tcp", p.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy listen %s: %w", p.cfg.Listen, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	if n := unprivilegedPortStart(); n < 1024 {
		p.log.Warn("any local user here may bind ports from net.ipv4.ip_unprivileged_port_start up: a peer cannot tell this ferryd's connections from theirs by its reserved source port",
			zap.Int("ipUnprivilegedPortStart", n))
	}
	return ln.Addr(), nil
}

// Addr is the proxy port's address once Listen has opened it, else nil.
func (p *Proxy) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Serve accepts connections until Shutdown, or until ctx ends, which cuts
// every relay and source socket at once (and reports the migrations cut).
func (p *Proxy) Serve(ctx context.Context) error {
	p.mu.Lock()
	ln := p.ln
	p.mu.Unlock()
	if ln == nil {
		return errors.New("proxy: Serve before Listen")
	}
	served := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			p.stop(ctx)
		case <-served:
		}
	}()
	go p.janitor(ctx)
	go p.watchMonitors(ctx)
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			close(served)
			if p.closingReason() == "" {
				p.cut("proxy listener failed: " + err.Error())
			} else {
				err = nil
				<-p.stopped
			}
			p.wg.Wait()
			return err
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(ctx, c)
		}()
	}
}

func (p *Proxy) reject(c net.Conn, reason, detail string) {
	p.metrics.reject(reason)
	p.log.Warn("proxy refused a connection", zap.String("reason", reason), zap.String("detail", detail), zap.String("peer", c.RemoteAddr().String()))
}

// handle serves one inbound connection: TLS, header, then control or relay.
func (p *Proxy) handle(ctx context.Context, raw net.Conn) {
	c, h, ok := p.openConn(ctx, raw)
	if !ok {
		return
	}
	if h.Kind == peer.KindControl {
		// A finish may hold its connection as long as a post-copy
		// migration: past a bound, more would only pile up.
		if p.controls.Add(1) > MaxControlConns {
			p.controls.Add(-1)
			p.serveControl(raw, c, true)
			return
		}
		defer p.controls.Add(-1)
		p.serveControl(raw, c, false)
		return
	}
	p.serveStream(raw, c, h)
}

// openConn secures a peer's connection and reads its header, within the
// header timeout and the room for connections opening; !ok: refused and
// closed.
func (p *Proxy) openConn(ctx context.Context, raw net.Conn) (net.Conn, peer.Header, bool) {
	counted, release, why := p.open(raw)
	if why != "" {
		// Thousands of half-sent headers would each hold a goroutine
		// and buffers for the whole header timeout.
		p.metrics.reject(reasonTooManyOpening)
		if p.openingLog.Allow() {
			p.log.Warn("proxy closed a connection for room", zap.String("reason", reasonTooManyOpening), zap.String("detail", why), zap.String("peer", raw.RemoteAddr().String()))
		}
	}
	opened := false
	defer func() {
		if !opened {
			release()
		}
	}()
	c := counted
	c.SetDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	if p.tls != nil {
		tc := tls.Server(&wire{Conn: counted}, p.tls.serverConfig())
		hctx, cancel := context.WithTimeout(ctx, p.cfg.HeaderTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			p.reject(raw, "tls_handshake", err.Error())
			raw.Close()
			return nil, peer.Header{}, false
		}
		c = tc
	}
	h, err := peer.ReadHeader(c)
	opened = true
	release()
	if p.tls == nil {
		// Past its header a plain stream is relayed by splice, which
		// takes the socket itself, not the counting around it.
		c = raw
	}
	if err != nil {
		reason := "malformed_header"
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			reason = "header_timeout"
		case errors.Is(err, peer.ErrVersion):
			reason = "unsupported_version"
		}
		p.reject(raw, reason, err.Error())
		c.Close()
		return nil, peer.Header{}, false
	}
	return c, h, true
}

// serveStream relays one stream of a prepared migration between the peer
// and the target QEMU here.
func (p *Proxy) serveStream(raw, c net.Conn, h peer.Header) {
	who, err := p.peerOf(c)
	if err != nil {
		p.reject(raw, reasonInvalidIdentity, err.Error())
		peer.WriteStatus(c, err.Error())
		c.Close()
		return
	}
	who = p.plainPeer(who, raw)
	target, e, reason, detail := p.reg.lookup(h, who.owner(), time.Now())
	if reason != "" {
		if reason == reasonWrongPeer {
			// Told as unknown: the peer learns nothing of it.
			p.reject(raw, reason, who.String()+" opened "+detail)
			peer.WriteStatus(c, fmt.Sprintf("migration %s is not prepared on this node", h.ID))
			c.Close()
			return
		}
		p.reject(raw, reason, detail)
		peer.WriteStatus(c, p.scrub(detail))
		c.Close()
		return
	}
	start := time.Now()
	local, reason, err := p.dialTargetQEMU(e, target, h)
	if err != nil {
		p.reg.release(e, h.Kind)
		// The error names the socket; the peer hears only that the
		// target QEMU is not listening.
		p.reject(raw, reason, err.Error())
		peer.WriteStatus(c, fmt.Sprintf("the target QEMU of migration %s does not take its %s stream", h.ID, h.Kind))
		c.Close()
		return
	}
	p.metrics.dialed("local", start)
	if !p.reg.track(e, c, h.Kind) {
		local.Close()
		c.Close()
		return
	}
	defer p.streamEnded(e, c)
	if err := peer.WriteStatus(c, ""); err != nil {
		local.Close()
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	e.counters.Conns[h.Kind].Add(1)
	defer p.metrics.open(h.Kind, "target")()
	// Plain TCP keeps its *net.TCPConn type here, so relay can splice.
	err = relay(c, withFaults(local, h.Kind), p.metrics.counter(h.Kind, true, e.counters), p.metrics.counter(h.Kind, false, e.counters))
	if err != nil && !isClosed(err) {
		p.log.Info("relay ended with an error", zap.String("migration", h.ID), zap.String("stream", h.Kind.String()), zap.Error(err))
	}
}

// SocketPath is KubeVirt's naming of a migration's source-side sockets:
// <dir>/<id>-<port>-source.sock for the memory (49152) and disk (49153)
// streams.
func SocketPath(dir, id string, k peer.Kind) string {
	port := "49152"
	if k == peer.KindDisk {
		port = "49153"
	}
	return filepath.Join(dir, id+"-"+port+"-source.sock")
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed)
}

// Registered lists the incoming migrations live on this (target) node.
func (p *Proxy) Registered() []Migration { return p.reg.active() }

// janitor keeps removing sockets left by migrations that ended without
// their registration (the target QEMU's, after a ferryd restart).
func (p *Proxy) janitor(ctx context.Context) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			removeStaleSockets(p.cfg.SocketDir, time.Minute, p.log)
			removeStaleMonitors(p.cfg.SocketDir, time.Minute, p.log)
		}
	}
}

// InboundSlots is how many migrations this node takes in at once, and
// how many it holds now.
func (p *Proxy) InboundSlots() (max, used int) {
	max = p.reg.inbound
	if max == 0 {
		max = MaxIncoming
	}
	return max, p.reg.inboundUse()
}
