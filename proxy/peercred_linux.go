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
// it. Nothing to check while QEMU runs as root (no group known).
//
// It is the whole check only for a migration registered without an
// Incoming (whose libvirt side the caller runs); checkTargetQEMU and the
// source's own check bind a stream to its one QEMU.
func (p *Proxy) checkLocalPeer(c net.Conn, what string) error {
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
	if int(cred.Gid) != gid || cred.Uid == 0 {
		return fmt.Errorf("%s: its peer is pid %d (uid %d, gid %d), not a QEMU of group %d", what, cred.Pid, cred.Uid, cred.Gid, gid)
	}
	return nil
}

// checkTargetQEMU refuses a target socket that domain's own QEMU does not
// listen on. Without sVirt every QEMU of the node runs as one uid, and the
// socket dir's sticky bit does not keep one from renaming another's
// socket and binding its own in its place: a group check would hand the
// guest's memory to that sibling. The listener's pid, which the kernel
// records at listen(2), is compared with the pid libvirt keeps for the
// domain's QEMU.
//
// A migration registered by hand (see Register), whose libvirt side the
// caller runs, has no QEMU known here: only the group is checked.
func (p *Proxy) checkTargetQEMU(c net.Conn, e *entry, what string) error {
	if p.cfg.Incoming == nil || e.in == nil && e.m.RecoveryOf == "" {
		return p.checkLocalPeer(c, what)
	}
	return p.checkQEMUOf(c, e.m.Domain, what)
}

// checkQEMUOf refuses a local socket that domain's QEMU does not listen on.
func (p *Proxy) checkQEMUOf(c net.Conn, domain, what string) error {
	pid, err := p.cfg.Incoming.QEMU(domain)
	if err != nil {
		return fmt.Errorf("%s: naming the QEMU it must lead to: %w", what, err)
	}
	return checkPeerPID(c, []int{pid}, false, what)
}

// checkPeerPID refuses c unless its other end is one of pids (the
// guest's QEMU first), or, where allowRoot, a root process: the source's
// libvirtd connects QEMU's main channel and hands QEMU the descriptor, and
// root may do anything anyway.
func checkPeerPID(c net.Conn, pids []int, allowRoot bool, what string) error {
	cred, err := peercred.Of(c)
	if err != nil {
		return fmt.Errorf("%s: reading its peer's credentials: %w", what, err)
	}
	if allowRoot && cred.Uid == 0 {
		return nil
	}
	for _, pid := range pids {
		if pid > 0 && int(cred.Pid) == pid {
			return nil
		}
	}
	return fmt.Errorf("%s: its peer is pid %d (uid %d), not the guest's QEMU (pid %d)", what, cred.Pid, cred.Uid, pids[0])
}
