package proxy

import (
	"fmt"
	"net"

	"github.com/ferry-vm/ferry/internal/peercred"
)

// checkLocalPeer refuses a local migration socket whose other end is not a
// process of QEMU's group. QEMU's user may write the socket dir, so any
// QEMU could put a link there in place of a target socket; without this
// check ferryd, as root, would follow it to any root-only socket of the
// host (libvirt's, a container runtime's) and relay a peer's bytes into
// it. allowRoot takes a root peer too: on the source, libvirtd itself
// connects QEMU's main channel and hands QEMU the descriptor. Nothing to
// check while QEMU runs as root (no group known).
func (p *Proxy) checkLocalPeer(c net.Conn, what string, allowRoot bool) error {
	p.groupMu.Lock()
	gid := p.group
	p.groupMu.Unlock()
	if gid < 0 {
		return nil
	}
	if _, ok := c.(*net.UnixConn); !ok {
		return nil
	}
	cred, err := peercred.Of(c)
	if err != nil {
		return fmt.Errorf("%s: reading its peer's credentials: %w", what, err)
	}
	if allowRoot && cred.Uid == 0 {
		return nil
	}
	if int(cred.Gid) != gid || cred.Uid == 0 {
		return fmt.Errorf("%s: its peer is pid %d (uid %d, gid %d), not a QEMU of group %d", what, cred.Pid, cred.Uid, cred.Gid, gid)
	}
	return nil
}
