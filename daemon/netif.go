package daemon

import (
	"context"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// migrationIP picks the address the proxy listens on: the first global
// unicast address of the migration interface (KubeVirt's dedicated
// migration network), else the node IP given on the command line.
func migrationIP(iface, nodeIP string) (net.IP, string, error) {
	if iface != "" {
		link, err := netlink.LinkByName(iface)
		if err == nil {
			addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
			if err != nil {
				return nil, "", fmt.Errorf("addresses of --migration-interface %s: %w", iface, err)
			}
			for _, a := range addrs {
				if a.Scope == unix.RT_SCOPE_UNIVERSE && a.IP.IsGlobalUnicast() {
					return a.IP, "interface " + iface, nil
				}
			}
		}
	}
	if nodeIP != "" {
		ip := net.ParseIP(nodeIP)
		if ip == nil {
			return nil, "", fmt.Errorf("--node-ip %q is not an IP address", nodeIP)
		}
		return ip, "--node-ip", nil
	}
	return nil, "", nil
}

// watchLink reports the migration interface going down or up until ctx ends.
func watchLink(ctx context.Context, iface string, log *zap.Logger, note func(up bool)) {
	if iface == "" {
		return
	}
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	if err := netlink.LinkSubscribe(updates, done); err != nil {
		log.Warn("cannot watch the migration interface", zap.String("interface", iface), zap.Error(err))
		return
	}
	go func() {
		<-ctx.Done()
		close(done)
	}()
	last := -1
	if l, err := netlink.LinkByName(iface); err == nil {
		last = 0
		if linkUp(l.Attrs()) {
			last = 1
		}
	}
	for u := range updates {
		if u.Link == nil || u.Link.Attrs().Name != iface {
			continue
		}
		up := linkUp(u.Link.Attrs())
		state := 0
		if up {
			state = 1
		}
		if state == last {
			continue
		}
		last = state
		note(up)
	}
}

func linkUp(a *netlink.LinkAttrs) bool {
	return a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperDown && a.OperState != netlink.OperLowerLayerDown
}
