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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Config configures a node's proxy.
type Config struct {
	// Listen is the one TCP address every peer connects to, on the
	// migration network.
	Listen string
	// TLS enables mutual TLS between nodes; nil relays plain TCP (with
	// splice), for a trusted migration network only.
	TLS *TLSFiles
	// SocketDir holds the source-side unix sockets; the target QEMU listens
	// at the same paths on the target node, so nodes must agree on it.
	SocketDir string
	// LibvirtSocket is this node's libvirt socket, the target of incoming
	// libvirt RPC streams.
	LibvirtSocket string
	HeaderTimeout time.Duration // for the TLS handshake and the header; default 5s
	DialTimeout   time.Duration // default 5s
	KeepAlive     time.Duration // TCP keepalive; default 15s
	// RegistrationTTL bounds how long a registered migration may go on
	// before the target forgets it; default 24h.
	RegistrationTTL time.Duration
	// Node names this node in the refusals of a proxy shutting down;
	// default the hostname.
	Node string
	// SourceDomain names the domain of an outgoing migration for the
	// shutdown report, since OpenSource is not told it; optional.
	SourceDomain func(migrationID string) string
	Log          *zap.Logger
	Registerer   prometheus.Registerer
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
	metrics *metrics
	reg     *registry

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
}

// New validates the configuration and loads the TLS files.
func New(cfg Config) (*Proxy, error) {
	cfg.defaults()
	p := &Proxy{cfg: cfg, log: cfg.Log, metrics: newMetrics(cfg.Registerer), reg: newRegistry(), sources: map[string]*SourceMigration{},
		stopped: make(chan struct{})}
	if cfg.TLS != nil {
		s, err := newTLSSource(*cfg.TLS)
		if err != nil {
			return nil, err
		}
		p.tls = s
	}
	if err := os.MkdirAll(cfg.SocketDir, 0o700); err != nil {
		return nil, fmt.Errorf("proxy socket dir %s: %w", cfg.SocketDir, err)
	}
	removeStaleSockets(cfg.SocketDir, 10*time.Second, p.log)
	return p, nil
}

// TLS reports whether peers are spoken to over mutual TLS.
func (p *Proxy) TLS() bool { return p.tls != nil }

// Listen opens the proxy port; Serve accepts on it.
func (p *Proxy) Listen() (net.Addr, error) {
	lc := net.ListenConfig{KeepAlive: p.cfg.KeepAlive}
	ln, err := lc.Listen(context.Background(), "tcp", p.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy listen %s: %w", p.cfg.Listen, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
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
	p.metrics.rejected.WithLabelValues(reason).Inc()
	p.log.Warn("proxy refused a connection", zap.String("reason", reason), zap.String("detail", detail), zap.String("peer", c.RemoteAddr().String()))
}

// handle serves one inbound connection: TLS, header, then control or relay.
func (p *Proxy) handle(ctx context.Context, raw net.Conn) {
	c := raw
	c.SetDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	if p.tls != nil {
		tc := tls.Server(raw, p.tls.serverConfig())
		hctx, cancel := context.WithTimeout(ctx, p.cfg.HeaderTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			p.reject(raw, "tls_handshake", err.Error())
			raw.Close()
			return
		}
		c = tc
	}
	h, err := ReadHeader(c)
	if err != nil {
		reason := "malformed_header"
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			reason = "header_timeout"
		case errors.Is(err, ErrVersion):
			reason = "unsupported_version"
		}
		p.reject(raw, reason, err.Error())
		c.Close()
		return
	}
	if h.Kind == KindControl {
		p.serveControl(c)
		return
	}
	target, e, reason, detail := p.reg.lookup(h, time.Now())
	if reason != "" {
		p.reject(raw, reason, detail)
		writeStatus(c, detail)
		c.Close()
		return
	}
	start := time.Now()
	local, err := net.DialTimeout("unix", target, p.cfg.DialTimeout)
	if err != nil {
		detail := fmt.Sprintf("cannot reach the %s socket of migration %s: %v", h.Kind, h.ID, err)
		p.reject(raw, "dial_failed", detail)
		writeStatus(c, detail)
		c.Close()
		return
	}
	p.metrics.dial.WithLabelValues("local").Observe(time.Since(start).Seconds())
	if !p.reg.track(e, c, h.Kind) {
		local.Close()
		c.Close()
		return
	}
	defer p.reg.untrack(e, c)
	if err := writeStatus(c, ""); err != nil {
		local.Close()
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	e.counters.Conns[h.Kind].Add(1)
	g := p.metrics.conns.WithLabelValues(h.Kind.String(), "target")
	g.Inc()
	defer g.Dec()
	// Plain TCP keeps its *net.TCPConn type here, so relay can splice.
	err = relay(c, local, p.metrics.counter(h.Kind, true, e.counters), p.metrics.counter(h.Kind, false, e.counters))
	if err != nil && !isClosed(err) {
		p.log.Info("relay ended with an error", zap.String("migration", h.ID), zap.String("stream", h.Kind.String()), zap.Error(err))
	}
}

// Register accepts a migration on this (target) node. The stream sockets
// are derived here, never taken from the peer, so a registration cannot
// point the proxy at any other socket on this host.
func (p *Proxy) Register(id, domain string, kinds []Kind) (Migration, error) {
	m := Migration{ID: id, Domain: domain, Targets: map[Kind]string{}, Expires: time.Now().Add(p.cfg.RegistrationTTL)}
	if err := ValidID(id); err != nil {
		return m, err
	}
	for _, k := range kinds {
		switch k {
		case KindLibvirt:
			if p.cfg.LibvirtSocket == "" {
				return m, errors.New("this node's proxy has no libvirt socket to relay to")
			}
			m.Targets[k] = p.cfg.LibvirtSocket
		case KindMemory, KindDisk:
			m.Targets[k] = SocketPath(p.cfg.SocketDir, id, k)
		default:
			return m, fmt.Errorf("stream %s cannot be registered", k)
		}
	}
	if err := p.reg.add(m); err != nil {
		return m, err
	}
	p.log.Info("migration registered", zap.String("migration", id), zap.String("domain", domain))
	return m, nil
}

// Unregister ends a migration on the target side and cuts its connections.
func (p *Proxy) Unregister(id, why string) *Counters {
	e, ok := p.reg.end(id, why)
	if !ok {
		return nil
	}
	// The target QEMU's listening sockets live in this proxy's directory
	// and outlive a failed incoming migration; they are ours to remove.
	for k, path := range e.m.Targets {
		if k != KindLibvirt {
			os.Remove(path)
		}
	}
	p.log.Info("migration unregistered", zap.String("migration", id), zap.String("why", why))
	return e.counters
}

// SocketPath is KubeVirt's naming of a migration's source-side sockets:
// <dir>/<id>-source.sock for libvirt, <dir>/<id>-<port>-source.sock for the
// memory (49152) and disk (49153) streams.
func SocketPath(dir, id string, k Kind) string {
	switch k {
	case KindMemory:
		return filepath.Join(dir, id+"-49152-source.sock")
	case KindDisk:
		return filepath.Join(dir, id+"-49153-source.sock")
	}
	return filepath.Join(dir, id+"-source.sock")
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed)
}

// UnregisterDomain ends every registration for a domain; the target calls
// it when its side of the migration ends, even if the source never could.
func (p *Proxy) UnregisterDomain(domain, why string) []string {
	var ids []string
	for _, m := range p.reg.active() {
		if m.Domain == domain {
			p.Unregister(m.ID, why)
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// Registered lists the live registrations on this (target) node.
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
		}
	}
}
