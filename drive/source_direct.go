package drive

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
)

// DataPath values of a MigrateRequest: QEMU's stream through both nodes'
// proxies (the default), or straight to the target's QEMU under QEMU's own
// TLS.
const (
	DataPathProxy  = "proxy"
	DataPathDirect = "direct"
)

// directAllowed says why this node will not start req on the direct path,
// or nil: the target must be a node it lists in --direct-peers, and its
// QEMU's migration certificates (the client pair, which this side's QEMU
// presents) must be usable.
func (s *Source) directAllowed(req MigrateRequest) error {
	if req.DataPath != DataPathDirect {
		return nil
	}
	if !slices.Contains(s.cfg.DirectPeers, req.TargetNode) {
		return fmt.Errorf("%w: node %s is not in this node's --direct-peers: the direct path is for node pairs that list each other", ErrBadRequest, req.TargetNode)
	}
	if err := s.proxy.CheckQEMUTLS(s.cfg.QEMUTLSDir, ""); err != nil {
		return fmt.Errorf("%w: the direct path needs QEMU's migration TLS on this node: %v", ErrConflict, err)
	}
	return nil
}

// directFromPod refuses the direct path to a domain a pod's libvirt
// serves: it is KubeVirt's node, whose streams keep the proxy.
func directFromPod(conn *libvirtx.Conn, req MigrateRequest) error {
	if req.DataPath == DataPathDirect && conn.Matched() {
		return fmt.Errorf("%w: %s runs in a pod: the direct path is for plain libvirt hosts", ErrBadRequest, req.Domain)
	}
	return nil
}

// directURI checks where the target says its QEMU listens: tcp:// on the
// host this node reached the target's proxy at, on a port of its own.
// Anything else would have this node's QEMU connect where the target
// chose, not to the node it prepared the migration on.
// It returns the URI rebuilt from that host and the port, never the
// target's own string.
func directURI(uri, target string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("the target's direct URI %q: %v", uri, err)
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return "", err
	}
	port, err := strconv.Atoi(u.Port())
	switch {
	case !strings.HasPrefix(uri, "tcp://") || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("the target's direct URI %q is not tcp://HOST:PORT", uri)
	case !net.ParseIP(u.Hostname()).Equal(net.ParseIP(host)) || net.ParseIP(host) == nil:
		return "", fmt.Errorf("the target's direct URI %q is not on %s, where its proxy answered", uri, host)
	case err != nil || port < 1024 || port > 65535:
		return "", fmt.Errorf("the target's direct URI %q has no port from 1024 to 65535", uri)
	}
	return "tcp://" + net.JoinHostPort(net.ParseIP(host).String(), strconv.Itoa(port)), nil
}

// abortForShutdown ends a direct migration whose node shuts down past its
// grace: with no stream here to cut, libvirt's job is aborted, and its
// Perform fails as a relayed one's would.
// It waits out a libvirt call of the owner's under way, and the abort's
// own; one asked before Perform began fails Perform at its start.
func abortForShutdown(o *Owner) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*ownerCallTimeout+time.Second)
	defer cancel()
	o.Abort(ctx, "ferryd", "this node is shutting down past its grace", false)
}
