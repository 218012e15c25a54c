package libvirtx

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.uber.org/zap"
)

// ErrSocketGone is the reason a connection ended when its socket, matched
// by PoolConfig.Glob, no longer exists: in KubeVirt the launcher pod and its
// domain went away, and the pool stops watching the socket.
var ErrSocketGone = errors.New("libvirt socket removed; no longer watched")

// ErrNotConnected: the pool has no live connection to that socket now.
var ErrNotConnected = errors.New("libvirt connection is down")

// Handler consumes one live connection. Serve runs until events closes (the
// connection was lost or the pool is stopping); the pool then reconnects.
type Handler interface {
	Serve(ctx context.Context, c *Conn, events <-chan Event)
	// Lost is called after Serve returns with the reason the connection
	// ended. errors.Is(err, ErrSocketGone) holds exactly when the pool
	// ended it because the socket was removed: nothing will come back on
	// that socket. Any other reason (the pool's context's cause when
	// ferryd is stopping, a broken or hung connection) says nothing of
	// the domains behind it, and the pool reconnects unless it is
	// stopping. A connection that broke before its socket was removed is
	// reported once, as broken.
	Lost(socket string, err error)
}

// PoolConfig says which sockets to watch and how patiently.
type PoolConfig struct {
	Sockets     []string      // always watched, retried while absent
	Glob        string        // matched kickSettle after inotify events, and every RescanEvery (KubeVirt: one socket per launcher pod)
	RescanEvery time.Duration // default 5s
	// GlobEmptyAfter is how long a Glob may match nothing before GlobStatus
	// calls it empty: a wrong --kubelet-pods-dir or mount looks exactly like a
	// node without VMs, except that it lasts. Default 5m.
	GlobEmptyAfter time.Duration
	CallTimeout    time.Duration // default DefaultCallTimeout
	PingEvery      time.Duration // default 5s
	BackoffMin     time.Duration // default 200ms
	BackoffMax     time.Duration // default 10s
	EventsBuffer   int           // default 1024
	// KeepAlive times libvirt's keepalive on the pool's connections, cut
	// when silent as libvirt's client cuts, and on those opened from them
	// (Conn.Another), which only report it.
	KeepAlive KeepAlive
}

func (c *PoolConfig) defaults() {
	if c.RescanEvery <= 0 {
		c.RescanEvery = 5 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.PingEvery <= 0 {
		c.PingEvery = 5 * time.Second
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 200 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 10 * time.Second
	}
	if c.EventsBuffer <= 0 {
		c.EventsBuffer = 1024
	}
	if c.GlobEmptyAfter <= 0 {
		c.GlobEmptyAfter = 5 * time.Minute
	}
}

// launcherEventsBuffer bounds a launcher socket's events buffer.
const launcherEventsBuffer = 64

// GlobStatus is what the pool knows of its glob.
type GlobStatus struct {
	Glob    string `json:"glob"`
	Matches int    `json:"matches"`
	// Since is when the glob last matched something, or when the pool
	// started if it never did.
	Since time.Time `json:"since"`
	// Empty is true once it has matched nothing for GlobEmptyAfter.
	Empty bool `json:"empty"`
	// Inotify says whether matches are seen at once, not only by the
	// periodic scan.
	Inotify bool `json:"inotify"`
}

// SocketStatus is what the pool knows of one socket.
type SocketStatus struct {
	Socket        string    `json:"socket"`
	Up            bool      `json:"up"`
	LibVersion    string    `json:"libvirtVersion,omitempty"`
	QEMUVersion   string    `json:"qemuVersion,omitempty"`
	LastError     string    `json:"lastError,omitempty"`
	Since         time.Time `json:"since"`
	Reconnects    int       `json:"reconnects"`
	LastPingMicro int64     `json:"lastPingMicroseconds,omitempty"`
	// UnresponsiveSince is when libvirt last sent anything, while the pool
	// holds it hung: its connection was cut for a ping past its deadline
	// or a keepalive's silence, and no connection has been answered since.
	// A daemon that closes or refuses connections is down, not hung; a
	// slow start after that is no hang either. Zero otherwise.
	UnresponsiveSince time.Time `json:"unresponsiveSince,omitzero"`
}

// hung says a connection ended because libvirt stopped answering.
func hung(err error) bool { return errors.Is(err, ErrTimeout) || errors.Is(err, ErrUnresponsive) }

// Pool keeps one connection per socket alive and hands each to a Handler.
type Pool struct {
	cfg PoolConfig
	h   Handler
	log *zap.Logger

	mu      sync.Mutex
	status  map[string]*SocketStatus
	conns   map[string]*Conn
	running map[string]context.CancelCauseFunc
	misses  map[string]int
	// leaving are sockets declared gone whose goroutine has not ended
	// yet: a socket back at the path waits for it, so that the old
	// connection's last word (gone) cannot fall on the new one.
	leaving map[string]bool
	started bool
	wg      sync.WaitGroup

	glob GlobStatus
}

// NewPool makes a pool; Run starts it.
func NewPool(cfg PoolConfig, h Handler, log *zap.Logger) *Pool {
	cfg.defaults()
	return &Pool{cfg: cfg, h: h, log: log, status: map[string]*SocketStatus{}, conns: map[string]*Conn{}, running: map[string]context.CancelCauseFunc{}, misses: map[string]int{}, leaving: map[string]bool{}}
}

// Run watches sockets until ctx ends, then waits for every connection to close.
func (p *Pool) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.RescanEvery)
	defer t.Stop()
	var kick chan struct{}
	var gw *globWatch
	p.mu.Lock()
	p.glob = GlobStatus{Glob: p.cfg.Glob, Since: time.Now()}
	p.mu.Unlock()
	if p.cfg.Glob != "" {
		kick = make(chan struct{}, 1)
		var err error
		if gw, err = newGlobWatch(p.cfg.Glob, kick, p.log); err != nil {
			p.log.Warn("no inotify: new libvirt sockets are found by the periodic scan alone",
				zap.String("glob", p.cfg.Glob), zap.Duration("every", p.cfg.RescanEvery), zap.Error(err))
		} else {
			defer gw.close()
			p.mu.Lock()
			p.glob.Inotify = true
			p.mu.Unlock()
		}
	}
	for {
		// Watches first: a socket created after them is an event, one
		// created before is seen by the scan.
		if gw != nil {
			gw.refresh()
		}
		p.rescan(ctx)
		if !nextScan(ctx, t.C, kick) {
			p.wg.Wait()
			return
		}
	}
}

// kickSettle is how long a rescan waits after an inotify event. A pod
// coming up makes a burst of them (each directory, then the socket), and
// any pod can make them without end in its own volumes: each rescan globs
// every pod's directories, so a burst gets one, and events alone never
// rescan more often than this.
const kickSettle = 200 * time.Millisecond

// nextScan waits for the periodic tick, or for kickSettle after the first
// kick; false means ctx ended.
func nextScan(ctx context.Context, tick <-chan time.Time, kick <-chan struct{}) bool {
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-kick:
			if settle == nil {
				settle = time.After(kickSettle)
			}
		case <-settle:
			return true
		}
	}
}

// GlobStatus reports on the glob; ok is false when none is configured.
func (p *Pool) GlobStatus() (GlobStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.glob
	if p.cfg.Glob == "" {
		return g, false
	}
	if g.Since.IsZero() {
		g.Since = time.Now()
	}
	g.Glob = p.cfg.Glob
	g.Empty = g.Matches == 0 && time.Since(g.Since) >= p.cfg.GlobEmptyAfter
	return g, true
}

// Status returns every watched socket's status, sorted by path.
func (p *Pool) Status() []SocketStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]SocketStatus, 0, len(p.status))
	for _, s := range p.status {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Socket < out[j].Socket })
	return out
}

// Ready reports whether every watched socket is connected (and at least one is watched).
func (p *Pool) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.status) == 0 {
		return false
	}
	for _, s := range p.status {
		if !s.Up {
			return false
		}
	}
	return true
}

// Started reports whether the first scan of sockets has run: from then on
// the pool knows what it watches (possibly nothing, on a node without VMs).
func (p *Pool) Started() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

func (p *Pool) rescan(ctx context.Context) {
	want := map[string]bool{}
	for _, s := range p.cfg.Sockets {
		want[s] = true
	}
	globbed := map[string]bool{}
	if p.cfg.Glob != "" {
		matches, err := glob(p.cfg.Glob)
		if err != nil {
			p.log.Error("bad libvirt socket glob", zap.String("glob", p.cfg.Glob), zap.Error(err))
		}
		for _, m := range matches {
			want[m] = true
			globbed[m] = true
		}
	}
	// Whether a path that left the glob is really gone is asked outside the
	// lock: a hung mount must not stall Status and Ready.
	p.mu.Lock()
	var left []string
	for s := range p.running {
		if !want[s] {
			left = append(left, s)
		}
	}
	p.mu.Unlock()
	gone := map[string]bool{}
	for _, s := range left {
		_, err := os.Lstat(s)
		gone[s] = errors.Is(err, fs.ErrNotExist)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = true
	if p.cfg.Glob != "" {
		p.glob.Matches = len(globbed)
		if len(globbed) > 0 {
			p.glob.Since = time.Now()
		}
	}
	for s := range want {
		if _, ok := p.running[s]; ok || p.leaving[s] {
			continue
		}
		sctx, cancel := context.WithCancelCause(ctx)
		p.running[s] = cancel
		p.status[s] = &SocketStatus{Socket: s, Since: time.Now()}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.keep(sctx, s)
			p.mu.Lock()
			delete(p.leaving, s)
			p.mu.Unlock()
		}()
	}
	// A glob match that vanished is a launcher pod that went away: stop
	// retrying it. Explicitly configured sockets are retried forever. Its
	// jobs end for good then, so a glob that missed it for another reason
	// (Glob drops I/O errors) must not count: the path itself must be gone,
	// at two scans in a row.
	for s, cancel := range p.running {
		if want[s] {
			delete(p.misses, s)
			continue
		}
		if !gone[s] {
			delete(p.misses, s)
			continue
		}
		if p.misses[s]++; p.misses[s] >= 2 {
			delete(p.misses, s)
			cancel(ErrSocketGone)
			delete(p.running, s)
			p.leaving[s] = true
			delete(p.status, s)
			p.log.Info("libvirt socket gone, no longer watched", zap.String("socket", s))
		}
	}
}

func (p *Pool) setStatus(socket string, f func(*SocketStatus)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.status[socket]; ok {
		f(s)
	}
}

// Conn is the live connection to a libvirt socket the pool serves: what
// acts on a domain there (an abort, a switch, a driven migration's calls)
// uses, while the tracker only reads through it.
func (p *Pool) Conn(socket string) (*Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[socket]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w (%s)", ErrNotConnected, socket)
}

// keep connects, serves and reconnects with exponential backoff until ctx ends.
func (p *Pool) keep(ctx context.Context, socket string) {
	backoff := p.cfg.BackoffMin
	logged := false
	// A socket removed while its daemon was already gone (a launcher pod's
	// usual end: libvirt exits, then the socket goes) was last reported as a
	// lost connection, or never served; its handler must still hear that it
	// is gone for good, however the removal and the loss interleave.
	var said error
	defer func() {
		if cause := context.Cause(ctx); errors.Is(cause, ErrSocketGone) && !errors.Is(said, ErrSocketGone) {
			p.h.Lost(socket, cause)
		}
	}()
	for ctx.Err() == nil {
		reported, err := p.once(ctx, socket)
		if reported != nil {
			said = reported
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.setStatus(socket, func(s *SocketStatus) {
				s.LastError = clipError(err)
				if !hung(err) {
					// Refused or gone: down, not hung.
					s.UnresponsiveSince = time.Time{}
				}
			})
			// One line per outage, not one per retry; none for a pod's
			// socket that is gone, which the next scan stops watching.
			if !logged && !p.podGone(socket) {
				p.log.Warn("libvirt unreachable, retrying with backoff", zap.String("socket", socket), zap.Error(err))
				logged = true
			}
		} else {
			backoff, logged = p.cfg.BackoffMin, false
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, p.cfg.BackoffMax)
	}
}

// learnQEMU shows the version of the QEMU behind c once its libvirt says
// it; one that will not is left unshown.
func (p *Pool) learnQEMU(ctx context.Context, c *Conn) {
	v, err := c.HypervisorVersion(ctx)
	if err != nil {
		p.log.Info("libvirt did not say its QEMU's version", zap.String("socket", c.Socket()), zap.Error(err))
		return
	}
	p.setStatus(c.Socket(), func(s *SocketStatus) {
		if s.Up {
			s.QEMUVersion = VersionString(v)
		}
	})
}

// once runs a single connection from dial to loss. A nil err means it was
// up and then ended (so backoff restarts from the minimum); reported is the
// reason the handler was told then.
func (p *Pool) once(ctx context.Context, socket string) (reported, err error) {
	beneath := ""
	if !p.configured(socket) {
		beneath = globRoot(p.cfg.Glob)
	}
	c, err := dial(ctx, socket, p.cfg.CallTimeout, beneath, p.cfg.KeepAlive, CutOnSilence)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ab, err := c.Abilities(ctx)
	if err != nil {
		return nil, err
	}
	if err := ab.Refusal(socket); err != nil {
		// Held off like any socket that fails: an upgrade is then
		// served at the next try.
		return nil, err
	}
	if c.Matched() {
		// Refused before anything of it is served: the backoff holds it
		// off, its status says why.
		if _, err := c.Domains(ctx); errors.Is(err, ErrNotALauncher) {
			return nil, err
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	buffer := p.cfg.EventsBuffer
	if c.Matched() {
		// A launcher's few domains send a few events a second at most;
		// a node holds a hundred such buffers.
		buffer = min(buffer, launcherEventsBuffer)
	}
	events, err := c.Subscribe(cctx, buffer)
	if err != nil {
		return nil, err
	}
	p.setStatus(socket, func(s *SocketStatus) {
		if !s.Up && !s.Since.IsZero() && s.LastError != "" {
			s.Reconnects++
		}
		s.Up, s.LastError, s.Since = true, "", time.Now()
		s.UnresponsiveSince = time.Time{}
		s.LibVersion, s.QEMUVersion = VersionString(ab.Libvirt), ""
	})
	p.log.Info("libvirt connected", zap.String("socket", socket), zap.String("version", VersionString(ab.Libvirt)))
	go p.learnQEMU(cctx, c)
	p.mu.Lock()
	p.conns[socket] = c
	p.mu.Unlock()
	// Handed out no longer once it is being closed; a connection to a
	// socket that came back meanwhile is the new one's to remove.
	forget := sync.OnceFunc(func() {
		p.mu.Lock()
		if p.conns[socket] == c {
			delete(p.conns, socket)
		}
		p.mu.Unlock()
	})
	defer forget()

	lost := make(chan error, 1)
	go func() { lost <- p.health(cctx, c) }()
	served := make(chan struct{})
	go func() {
		defer close(served)
		p.h.Serve(cctx, c, events)
	}()
	var reason error
	select {
	case reason = <-lost:
	case <-served:
		reason = context.Canceled
		select {
		case <-c.Done():
			// The events ended with the connection: health saw it close
			// too, and says why.
			reason = <-lost
		default:
		}
	}
	forget()
	cancel()
	c.Close()
	<-served
	if ctx.Err() != nil {
		// The socket's own cause: ErrSocketGone if rescan dropped it, the
		// pool's context's cause if ferryd is stopping.
		reason = context.Cause(ctx)
	}
	p.setStatus(socket, func(s *SocketStatus) {
		s.Up, s.Since = false, time.Now()
		if reason != nil {
			s.LastError = clipError(reason)
		}
		if hung(reason) {
			s.UnresponsiveSince = c.LastHeard()
		}
	})
	p.h.Lost(socket, reason)
	switch {
	case ctx.Err() != nil:
	case p.podGone(socket):
		p.log.Info("libvirt connection ended with its socket (a launcher pod's end)", zap.String("socket", socket), zap.Error(reason))
	default:
		p.log.Warn("libvirt connection lost", zap.String("socket", socket), zap.Error(reason))
	}
	return reason, nil
}

// podGone says a socket the glob matched is no longer there: its pod
// ended, which is no fault to warn of.
func (p *Pool) podGone(socket string) bool {
	if p.configured(socket) {
		return false
	}
	_, err := os.Lstat(socket)
	return errors.Is(err, fs.ErrNotExist)
}

func (p *Pool) configured(socket string) bool {
	for _, s := range p.cfg.Sockets {
		if s == socket {
			return true
		}
	}
	return false
}

// health pings on a schedule; a ping past its deadline means libvirtd is
// hung, and the connection is cut so nothing waits on it any longer. The
// keepalive cuts it too when it hears nothing for its limit: a ping needs
// one of libvirtd's (priority) workers, a keepalive answer only its event
// loop. A connection whose other calls were answered in time lately needs
// no ping: a worker just served one (an idle launcher's reads, every few
// seconds, so its libvirt is asked nothing more).
func (p *Pool) health(ctx context.Context, c *Conn) error {
	spare := p.cfg.PingEvery * 3 / 2
	var pinged time.Time // when the last ping was answered
	t := time.NewTimer(p.cfg.PingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.Done():
			if err := c.dialer.refusal(); err != nil {
				return err
			}
			return errConnClosed
		case <-t.C:
			start := time.Now()
			// Another call than the ping itself, answered lately.
			if la := c.lastAnswered(); la.After(pinged) && start.Sub(la) < spare {
				t.Reset(spare - start.Sub(la))
				continue
			}
			if _, err := c.Ping(ctx); err != nil {
				return err
			}
			pinged = time.Now()
			p.setStatus(c.Socket(), func(s *SocketStatus) { s.LastPingMicro = pinged.Sub(start).Microseconds() })
			t.Reset(p.cfg.PingEvery)
		}
	}
}

type connError string

func (e connError) Error() string { return string(e) }

const errConnClosed = connError("libvirt closed the connection")

// VersionString is a libvirt-numbered version (major*1,000,000 +
// minor*1,000 + micro) as people write it; "" for 0.
func VersionString(v uint64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
}

// maxKeptError bounds a libvirt error kept per socket: a pod's libvirt
// chooses its errors' text, up to 4 MiB each.
const maxKeptError = 512

// clipError is err's text as kept and shown: printable, and at most
// maxKeptError bytes of it.
func clipError(err error) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, strings.ToValidUTF8(err.Error(), ""))
	if len(s) > maxKeptError {
		s = strings.ToValidUTF8(s[:maxKeptError], "") + "…"
	}
	return s
}
