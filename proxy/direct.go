package proxy

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/peer"
)

// directFrom says whether this node takes a direct migration from peer,
// and where its QEMU listens for it: the address the source reached this
// proxy at, which the source can reach by that token. reason and why are
// the refusal's when not.
func (p *Proxy) directFrom(raw net.Conn, who Peer, req peer.ControlRequest) (host, reason, why string) {
	switch {
	case p.cfg.Incoming == nil:
		return "", reasonDirectUnavailable, "this node takes no Ferry-driven incoming migrations"
	case who.Node == "" || !slices.Contains(p.cfg.DirectPeers, who.Node):
		return "", reasonDirectNotAllowed, "this node takes the direct path only from the nodes in its --direct-peers, named by their certificates"
	case req.PostCopy || req.Disk:
		return "", reasonDirectNotAllowed, "the direct path carries pre-copy memory only: no post-copy, no disk stream"
	}
	// The proxy listens on one address, the migration network's; QEMU
	// listens there too, never on an address a peer picks.
	addr, ok := raw.LocalAddr().(*net.TCPAddr)
	listen, _, _ := net.SplitHostPort(p.cfg.Listen)
	if ip := net.ParseIP(listen); !ok || ip == nil || ip.IsUnspecified() || !ip.Equal(addr.IP) {
		return "", reasonDirectUnavailable, "this node's proxy does not listen on one migration address, which its QEMU would listen on"
	}
	host = addr.IP.String()
	if err := p.CheckQEMUTLS(p.cfg.QEMUTLSDir, host); err != nil {
		p.log.Warn("a direct migration was refused: QEMU's migration TLS is not usable here", zap.Error(err))
		return "", reasonDirectUnavailable, "this node's QEMU migration certificates are not usable for it (see its log)"
	}
	return host, "", ""
}

// hostForURI brackets an IPv6 address for a URI's host.
func hostForURI(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]"
	}
	return ip
}

// DirectReady says what keeps this node from the direct path, at start:
// a proxy on no one migration address (QEMU would listen where a peer
// picks), or QEMU's migration TLS in dir as QEMU would refuse it.
func (p *Proxy) DirectReady(dir string) error {
	listen, _, _ := net.SplitHostPort(p.cfg.Listen)
	if ip := net.ParseIP(listen); ip == nil || ip.IsUnspecified() {
		return errors.New("the direct path needs the proxy on one migration address (--migration-interface or --node-ip), where the target QEMU listens too")
	}
	return p.CheckQEMUTLS(dir, listen)
}

// awaitDirect keeps a prepared direct migration only while its source
// may still show up: a source that never starts its Perform must not
// keep the target QEMU listening, open to anyone on the network, for its
// whole deadline. A first-stream wait after the prepare, as a relayed
// migration with no stream is, it is dropped if no connection to QEMU is
// open. Once one from the source's proxy's address is seen, the
// migration is QEMU's and libvirt's to end, within its deadline. While
// only others are (a stranger's, or the source's from another address of
// its node), and when the socket table cannot be read, it is looked at
// again after each wait.
func (p *Proxy) awaitDirect(e *entry, id, uri string, source net.Addr) {
	who := net.IP(nil)
	if a, ok := source.(*net.TCPAddr); ok {
		who = a.IP
	}
	wait := p.cfg.FirstStreamWait
	var look func()
	look = func() {
		w, err := qemuWaitAt(uri, who)
		switch {
		case err != nil:
			p.log.Warn("cannot tell whether the source reached the target QEMU of a direct migration; looking again",
				zap.String("migration", id), zap.String("uri", uri), zap.Duration("after", wait), zap.Error(err))
			p.reg.rearm(e, wait, look)
		case w == qemuAlone:
			p.dropIncoming(id, fmt.Sprintf("its QEMU listened at %s with no connection open to it, %v after the prepare or the last look", uri, wait))
		case w == qemuGone:
			p.log.Info("the target QEMU of a direct migration is not seen listening (it ended, or listens in another network namespace than ferryd's): the migration is left to its time",
				zap.String("migration", id), zap.String("uri", uri))
		case w == qemuOther:
			p.log.Info("the target QEMU of a direct migration has connections from other addresses than the source's proxy's; looking again",
				zap.String("migration", id), zap.String("uri", uri), zap.Duration("after", wait))
			p.reg.rearm(e, wait, look)
		}
	}
	p.reg.rearm(e, wait, look)
}
