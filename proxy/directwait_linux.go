package proxy

import (
	"net"
	"net/url"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// qemuStillAwaits says whether the target QEMU of a direct migration
// still only listens at uri: a socket listens on its address and port,
// and none is connected there, not even half-open. When that cannot be
// told (the sockets could not be read, or QEMU's are in another network
// namespace), it says no, and the migration is left to its time.
func qemuStillAwaits(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	port, err := strconv.Atoi(u.Port())
	if ip == nil || err != nil || port <= 0 {
		return false
	}
	family := uint8(unix.AF_INET6)
	if ip.To4() != nil {
		family = unix.AF_INET
	}
	socks, err := netlink.SocketDiagTCP(family)
	if err != nil {
		return false // a dump cut short may have missed the connection
	}
	listening := false
	for _, s := range socks {
		if int(s.ID.SourcePort) != port || !(s.ID.Source.Equal(ip) || s.ID.Source.IsUnspecified()) {
			continue
		}
		if s.State != netlink.TCP_LISTEN {
			return false
		}
		listening = true
	}
	return listening
}
