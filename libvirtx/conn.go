package libvirtx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/internal/peercred"
	"github.com/ferry-vm/ferry/internal/unixsock"
)

// ErrTimeout is returned when libvirt does not answer a call within its
// deadline. go-libvirt has no per-call timeout, so a hung libvirtd would
// otherwise hang the caller forever.
var ErrTimeout = errors.New("libvirt did not answer in time")

// DefaultCallTimeout bounds every RPC unless the caller's context is shorter.
const DefaultCallTimeout = 5 * time.Second

// Conn is one connection to one libvirt socket.
type Conn struct {
	socket  string
	timeout time.Duration
	l       *libvirt.Libvirt
	done    <-chan struct{}
	dialer  *unixDialer
	keep    KeepAlive
	ka      *keepAlive // nil when the daemon has no keepalive
	// cutHung: a connection on which maxUnanswered calls wait is cut, not
	// waited on: the pool's connections to a pod's socket (see
	// unanswered.go).
	cutHung bool
	// unanswered counts calls given up on and not yet answered (see
	// unanswered.go).
	unanswered atomic.Int32
	// answeredAt is when a call last got libvirt's answer in time (since
	// monoEpoch): a worker of the daemon's served it then.
	answeredAt atomic.Int64
}

// unixDialer keeps the connection it made so Ferry can cut a connection
// to a hung libvirtd (go-libvirt's Disconnect first sends an RPC, which a
// hung daemon never answers) and speak keepalive on it.
type unixDialer struct {
	path    string
	timeout time.Duration
	// beneath, set for a glob's match, refuses a path that is a link or
	// has one on its way below beneath (see DialMatched, globRoot).
	beneath string
	mu      sync.Mutex
	framed  *framedConn
}

// socketOnly: the path is a glob's match, which a neighbour may write.
func (d *unixDialer) socketOnly() bool { return d.beneath != "" }

// refusal is why Ferry cut the connection (its packet check, its
// keepalive), or nil.
func (d *unixDialer) refusal() error {
	if f := d.conn(); f != nil {
		return f.refusal()
	}
	return nil
}

// conn is the connection dialed, nil before.
func (d *unixDialer) conn() *framedConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.framed
}

func (d *unixDialer) Dial() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	// KubeVirt's launcher sockets are longer than a unix address holds.
	var c net.Conn
	var err error
	if d.socketOnly() {
		c, err = unixsock.DialSocketBeneath(ctx, d.beneath, d.path)
	} else {
		c, err = unixsock.Dial(ctx, d.path)
	}
	if err != nil {
		return nil, err
	}
	f := newFramedConn(c)
	f.socket = d.path
	if d.socketOnly() {
		f.limit = maxLauncherPacket
	}
	d.mu.Lock()
	d.framed = f
	d.mu.Unlock()
	return f, nil
}

// cutFor cuts the connection and keeps why, for every caller to see.
func (d *unixDialer) cutFor(err error) {
	if f := d.conn(); f != nil {
		f.cutFor(err)
	}
}

func (d *unixDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.framed != nil {
		d.framed.Close()
	}
}

// Dial connects to the libvirt socket at path. callTimeout bounds each
// later call (0 means DefaultCallTimeout). The connection speaks libvirt's
// keepalive with the default timing and only reports its daemon's silence
// (ReportSilence).
func Dial(ctx context.Context, path string, callTimeout time.Duration) (*Conn, error) {
	return dial(ctx, path, callTimeout, "", KeepAlive{}, ReportSilence)
}

// DialMatched connects to a socket a glob matched: only if the path is a
// unix socket itself, not a link. The glob reaches into every pod's
// volumes, and a pod could put a link there that points ferryd at another
// pod's libvirt or the host's; the check and the connect are made on one
// inode, so the name cannot be swapped in between. The pool dials its
// glob's matches so from the glob's root down (globRoot), following no
// link on the way either.
func DialMatched(ctx context.Context, path string, callTimeout time.Duration) (*Conn, error) {
	return dial(ctx, path, callTimeout, filepath.Dir(path), KeepAlive{}, ReportSilence)
}

// dial connects to path; with beneath set (a glob's match), only to a
// socket reached from beneath without a link (see DialMatched).
func dial(ctx context.Context, path string, callTimeout time.Duration, beneath string, keep KeepAlive, on OnSilence) (*Conn, error) {
	if callTimeout <= 0 {
		callTimeout = DefaultCallTimeout
	}
	c := &Conn{socket: path, timeout: callTimeout, keep: keep, cutHung: on == CutOnSilence && beneath != "",
		dialer: &unixDialer{path: path, timeout: callTimeout, beneath: beneath}}
	c.l = libvirt.NewWithDialer(c.dialer)
	// The dialer already picked the socket; the daemon must be asked for its
	// own driver. A "qemu+unix://...?socket=" URI would make libvirtd open a
	// remote-driver connection back to itself, and its main loop then
	// deadlocks deregistering that connection's events when a client leaves.
	uri := driverURI(path)
	err := do(ctx, c, "connect", func(l *libvirt.Libvirt) error {
		return l.ConnectToURI(uri)
	})
	if err != nil {
		c.dialer.cut()
		return nil, err
	}
	c.done = c.l.Disconnected()
	if err := startKeepAlive(ctx, c, keep, on); err != nil {
		c.dialer.cut()
		return nil, err
	}
	return c, nil
}

// Another opens a second connection to the same socket, dialed the same
// way, for work whose state libvirt ties to its connection (a migration's
// protocol steps: the target QEMU of a Prepare lives until its Finish or
// until the connection that prepared it closes). It is never the one the
// pool pings and cuts: its keepalive, timed as c's, only reports a silent
// daemon (Unresponsive), never cuts the connection (see ReportSilence).
func (c *Conn) Another(ctx context.Context) (*Conn, error) {
	return dial(ctx, c.socket, c.timeout, c.dialer.beneath, c.keep, ReportSilence)
}

// Socket is the path this connection was made to.
func (c *Conn) Socket() string { return c.socket }

// Done is closed when the connection is lost or closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close disconnects politely if libvirt answers within a second, and cuts
// the socket regardless, so it never hangs on a hung daemon.
func (c *Conn) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := do(ctx, c, "disconnect", (*libvirt.Libvirt).Disconnect)
	c.dialer.cut()
	return err
}

// Ping asks libvirt for its version: the cheapest round trip that proves the
// daemon's RPC loop is alive.
func (c *Conn) Ping(ctx context.Context) (uint64, error) {
	return call(ctx, c, "ping", (*libvirt.Libvirt).ConnectGetLibVersion)
}

// qemuVersionWait bounds the wait for a QEMU's version: a launcher's
// libvirt probes its QEMU when first asked, seconds on a busy node (past
// the call timeout), so the pool asks it once the connection is served,
// never on the way there.
const qemuVersionWait = 2 * time.Minute

// HypervisorVersion is the version of the hypervisor libvirt drives
// (QEMU's, as major*1,000,000 + minor*1,000 + micro), waiting for a
// libvirt that probes it first; the caller's ctx may bound it sooner.
func (c *Conn) HypervisorVersion(ctx context.Context) (uint64, error) {
	return callWithin(ctx, c, "hypervisor version", qemuVersionWait, (*libvirt.Libvirt).ConnectGetVersion, nil)
}

// CallError names the libvirt call and socket that failed.
type CallError struct {
	Op     string
	Socket string
	Err    error
}

func (e *CallError) Error() string { return fmt.Sprintf("libvirt %s (%s): %v", e.Op, e.Socket, e.Err) }
func (e *CallError) Unwrap() error { return e.Err }

// IsNoMetadata says libvirt has no metadata of the asked kind.
func IsNoMetadata(err error) bool {
	var le libvirt.Error
	return errors.As(err, &le) && le.Code == uint32(libvirt.ErrNoDomainMetadata)
}

// IsNoDomain reports whether err says the domain does not exist (any more).
func IsNoDomain(err error) bool {
	var le libvirt.Error
	if errors.As(err, &le) {
		return le.Code == uint32(libvirt.ErrNoDomain)
	}
	return false
}

// DaemonPID is the process ID of the libvirt daemon at the other end of
// this connection (in ferryd's PID namespace), as the kernel recorded it:
// the daemon that runs QEMU when ferryd dials its own socket (libvirtd's,
// virtqemud's), not when it dials virtproxyd, which only forwards.
func (c *Conn) DaemonPID() (int, error) {
	f := c.dialer.conn()
	if f == nil {
		return 0, errors.New("not connected")
	}
	cred, err := peercred.Of(f.Conn)
	if err != nil {
		return 0, err
	}
	return int(cred.Pid), nil
}
