package proxy

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpOptions sets TCP_USER_TIMEOUT on a proxy socket before it connects or
// listens (accepted sockets inherit it): a stream whose sent bytes go
// unacknowledged that long is dropped, so QEMU and libvirt hear of a cut
// link instead of waiting on the kernel's retransmissions.
func (p *Proxy) tcpOptions(network, _ string, rc syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(p.cfg.UserTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}
