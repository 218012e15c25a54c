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
	// qemuAlone: QEMU listens, and no connection to it is open.
	qemuAlone qemuWait = iota
	// qemuSource: an open connection to QEMU comes from the source's
	// address.
	qemuSource
	// qemuOther: open connections to QEMU come from other addresses
	// only: a stranger's, or the source's from an address of its own
	// other than its proxy's.
	qemuOther
	// qemuGone: nothing listens there any more; QEMU ended.
	qemuGone
)

// qemuWaitAt reads the socket table for the target QEMU listening at uri
// for a direct migration whose source's proxy came from peer. QEMU
// listens for the whole incoming migration (since 7.0 it takes and
// ignores extra connections), so a listener says nothing of progress;
// its open connections do. A half-open one (SYN_RECV) is not counted: a
// forged SYN makes one. A QEMU in another network namespace than
// ferryd's is not seen, and reads as gone.
func qemuWaitAt(uri string, who net.IP) (qemuWait, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return qemuGone, err
	}
	ip := net.ParseIP(u.Hostname())
	port, err := strconv.Atoi(u.Port())
	if ip == nil || err != nil || port <= 0 || port > 65535 {
		return qemuGone, errors.New("no IP address and port in " + uri)
	}
	family := uint8(unix.AF_INET6)
	if ip.To4() != nil {
		family = unix.AF_INET
	}
	socks, err := netlink.SocketDiagTCP(family)
	if err != nil {
		return qemuGone, err // a dump cut short may have missed the connection
	}
	listening, source, other := false, false, false
	for _, s := range socks {
		if int(s.ID.SourcePort) != port || !s.ID.Source.Equal(ip) {
			continue
		}
		switch s.State {
		case netlink.TCP_LISTEN:
			listening = true
		case netlink.TCP_ESTABLISHED, netlink.TCP_CLOSE_WAIT:
			if s.ID.Destination.Equal(who) {
				source = true
			} else {
				other = true
			}
		}
	}
	switch {
	case source:
		return qemuSource, nil
	case !listening:
		return qemuGone, nil
	case other:
		return qemuOther, nil
	}
	return qemuAlone, nil
}
