package proxy

import (
	"errors"
	"net"
	"net/url"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// qemuWait is what the kernel's socket table says of a direct
// migration's target QEMU.
type qemuWait int

const (
	// qemuListensAlone: QEMU listens, and the source has not connected.
	qemuListensAlone qemuWait = iota
	// qemuListensWithPeer: QEMU still listens (for more channels), and
	// the source has connected.
	qemuListensWithPeer
	// qemuDoneListening: nothing listens there any more; QEMU took its
	// connections, or ended.
	qemuDoneListening
)

// qemuWaitAt reads the socket table for the target QEMU listening at uri
// for a direct migration from peer (the source node's address). Only an
// open connection from peer counts as the source's: a stranger's, a
// half-open one from anywhere else, or one closing, keeps no migration.
// QEMU closes its listener once it has taken every channel, so a
// migration under way no longer listens at all. A QEMU in another
// network namespace than ferryd's is not seen: it reads as done, and the
// migration is left to its time.
func qemuWaitAt(uri string, peer net.IP) (qemuWait, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return qemuDoneListening, err
	}
	ip := net.ParseIP(u.Hostname())
	port, err := strconv.Atoi(u.Port())
	if ip == nil || err != nil || port <= 0 || port > 65535 {
		return qemuDoneListening, errors.New("no IP address and port in " + uri)
	}
	family := uint8(unix.AF_INET6)
	if ip.To4() != nil {
		family = unix.AF_INET
	}
	socks, err := netlink.SocketDiagTCP(family)
	if err != nil {
		return qemuDoneListening, err // a dump cut short may have missed the connection
	}
	listening, connected := false, false
	for _, s := range socks {
		if int(s.ID.SourcePort) != port || !s.ID.Source.Equal(ip) {
			continue
		}
		switch s.State {
		case netlink.TCP_LISTEN:
			listening = true
		case netlink.TCP_ESTABLISHED, netlink.TCP_SYN_RECV:
			connected = connected || s.ID.Destination.Equal(peer)
		}
	}
	switch {
	case !listening:
		return qemuDoneListening, nil
	case connected:
		return qemuListensWithPeer, nil
	}
	return qemuListensAlone, nil
}
