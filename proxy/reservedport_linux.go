package proxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ferryd dials its peers from a reserved port, below 1024, which only a
// privileged process may bind: a peer counts the connections still in
// their handshake from such a port apart from the others (see openingKey),
// so a local user on this node, who shares its address, cannot take the
// room this ferryd's finish needs. The range keeps clear of what binds
// reserved ports on a host: glibc's bindresvport (600-1023, for RPC
// daemons, which fall back to 512-599 only once those are all taken) and
// the kernel's NFS client (665-1023); a connection past it (more than 88
// at once to one peer) comes from an ephemeral port and only loses that
// room.
const (
	reservedPortLow  = 512
	reservedPortHigh = 599
)

// dialTCP connects to a peer from a reserved port when it can, and from
// an ephemeral one when this process may not bind one (no
// CAP_NET_BIND_SERVICE), said once in the log, or when every port of the
// range is in use towards that peer (a connection closed here keeps its
// four-tuple a minute in TIME_WAIT), said now and then.
func (p *Proxy) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	if !p.noReservedPorts.Load() {
		c, tried, err := p.dialReserved(ctx, addr)
		if c != nil || err != nil {
			return c, err
		}
		// Not tried: this process may not bind one (said once, in
		// dialReserved); tried: every one is in use.
		if tried && p.portsLog.Allow() {
			p.log.Warn("every reserved source port is in use towards a peer: dialled from an ephemeral port, which a local user there can crowd out", zap.String("peer", addr))
		}
	}
	d := net.Dialer{KeepAlive: p.cfg.KeepAlive, Control: p.tcpOptions}
	return d.DialContext(ctx, "tcp", addr)
}

// dialReserved tries every port of the range once, in random order. tried
// is false if this process may not bind one; a nil connection and error
// with tried true means all were in use.
func (p *Proxy) dialReserved(ctx context.Context, addr string) (net.Conn, bool, error) {
	for _, i := range rand.Perm(reservedPortHigh - reservedPortLow + 1) {
		d := net.Dialer{KeepAlive: p.cfg.KeepAlive, LocalAddr: &net.TCPAddr{Port: reservedPortLow + i}, Control: p.reservedPortOptions}
		c, err := d.DialContext(ctx, "tcp", addr)
		switch {
		case err == nil:
			return c, true, nil
		case errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EADDRNOTAVAIL):
			continue // taken, or already used towards this peer
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			if p.noReservedPorts.CompareAndSwap(false, true) {
				p.log.Warn("ferryd may not bind a reserved port (below 1024) to dial its peers: a local user on this node can crowd its connections out at a peer; give it CAP_NET_BIND_SERVICE", zap.Error(err))
			}
			return nil, false, nil
		default:
			return nil, true, err
		}
	}
	return nil, true, nil
}

// reservedPortOptions lets a reserved port bound for one peer be bound
// again for another (each connection is its own four-tuple), and sets
// what every proxy socket has.
func (p *Proxy) reservedPortOptions(network, address string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	return p.tcpOptions(network, address, rc)
}

// unprivilegedPortStart is the lowest port any process may bind in this
// network namespace (net.ipv4.ip_unprivileged_port_start), 1024 where the
// kernel does not say.
func unprivilegedPortStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 1024
	}
	return n
}
