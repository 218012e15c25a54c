package daemon

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"strconv"

	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/peer"
)

// qemuGroup tells the proxy which group QEMU runs with, so that QEMU may
// create and reach its migration sockets: --qemu-group when set, else
// what the node's libvirt says (the base label of its DAC driver), which
// needs no group database in ferryd's container and follows qemu.conf.
func qemuGroup(cfg Config, conns drive.Conns) (func(context.Context) (int, error), error) {
	if cfg.QEMUGroup != "" {
		gid, err := lookupGroup(cfg.QEMUGroup)
		if err != nil {
			return nil, err
		}
		return func(context.Context) (int, error) { return gid, nil }, nil
	}
	if len(cfg.LibvirtSockets) == 0 {
		return func(context.Context) (int, error) {
			return -1, errors.New("no fixed --libvirt-socket to ask which group QEMU runs with: set --qemu-group")
		}, nil
	}
	sock := cfg.LibvirtSockets[0]
	return func(ctx context.Context) (int, error) {
		c, err := conns.Conn(sock)
		if err != nil {
			return -1, &peer.Refusal{Reason: drive.ReasonLibvirtUnavailable, Msg: "this node's libvirt is not connected"}
		}
		sec, err := c.Security(ctx)
		if err != nil {
			return -1, drive.PeerError(err)
		}
		return sec.GID, nil
	}, nil
}

// lookupGroup takes a group name or a numeric gid.
func lookupGroup(g string) (int, error) {
	if n, err := strconv.ParseUint(g, 10, 31); err == nil {
		return int(n), nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return -1, fmt.Errorf("--qemu-group %q: %w (give a numeric gid if the group is not in this container's /etc/group)", g, err)
	}
	n, err := strconv.Atoi(grp.Gid)
	if err != nil {
		return -1, fmt.Errorf("--qemu-group %q: gid %q is not a number", g, grp.Gid)
	}
	return n, nil
}
