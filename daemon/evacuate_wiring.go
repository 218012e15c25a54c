package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/evacuate"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
	"github.com/ferry-vm/ferry/plan"
)

// setupEvacuation wires evacuate/: its checks and plans read the tracker,
// the pool, the meter and the cluster; its runner moves domains through
// the source, once there is one.
func (d *Daemon) setupEvacuation(cfg Config, log *zap.Logger) {
	var mover evacuate.Mover
	if d.source != nil {
		mover = d.source
	}
	d.evac = evacuate.NewRunner(mover, d.Tracker.JobByName, cfg.Peers, log)
	d.checks = evacuate.NewChecker(evacuate.CheckConfig{Node: cfg.NodeName, NodeSockets: cfg.LibvirtSockets,
		Libvirt: poolLibvirt{tracker: d.Tracker, pool: d.Pool}})
	pc := evacuate.PlanConfig{Node: cfg.NodeName, Peers: cfg.Peers, OutboundSlots: cfg.OutboundSlots, LinkBandwidthMiBs: cfg.LinkBandwidthMiBs,
		Limits: planLimits(cfg.Policy), DirtyRate: cfg.DirtyRate, CallTimeout: cmp.Or(cfg.CallTimeout, libvirtx.DefaultCallTimeout),
		Tracker: d.Tracker, Cluster: d.dyn}
	if d.meter != nil {
		pc.Meter = d.meter
	}
	d.plans = evacuate.NewPlanner(pc, d.checks, d.evac)
}

// planLimits are what a plan predicts a migration Ferry drives with: the
// node's policy's, when it acts, else libvirt's default downtime and no
// post-copy.
func planLimits(p policy.Settings) plan.Limits {
	if p.Mode == policy.Act {
		return plan.Limits{MaxDowntime: p.MaxDowntime, AllowPostCopy: p.AllowPostCopy}
	}
	return plan.Limits{MaxDowntime: migration.DefaultMaxDowntime}
}

// poolLibvirt is what evacuate/ asks of libvirt, answered by the tracker
// (which finds a domain) and the pool (which calls its libvirt).
type poolLibvirt struct {
	tracker *migration.Tracker
	pool    *libvirtx.Pool
}

func (l poolLibvirt) Domain(socket, name string) (evacuate.LiveDomain, error) {
	socket, dom, err := l.tracker.DomainRef(socket, name)
	if err != nil {
		return nil, err
	}
	conn, err := l.pool.Conn(socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", migration.ErrNoLibvirt, err)
	}
	return liveDomain{conn: conn, dom: dom, socket: socket, name: name}, nil
}

// Launcher: a socket the pool found by the launchers' glob, once
// connected.
func (l poolLibvirt) Launcher(socket string) bool {
	c, err := l.pool.Conn(socket)
	return err == nil && c.Matched()
}

func (poolLibvirt) RefusedFeatures(domXML string) []string { return libvirtx.RefusedFeatures(domXML) }

func (poolLibvirt) TimedOut(err error) bool { return errors.Is(err, libvirtx.ErrTimeout) }

// liveDomain is a domain the tracker found, on its libvirt's connection.
type liveDomain struct {
	conn         *libvirtx.Conn
	dom          libvirt.Domain
	socket, name string
}

func (l liveDomain) Socket() string { return l.socket }

func (l liveDomain) XML(ctx context.Context) (string, error) { return l.conn.DomainXML(ctx, l.dom) }

// DiskSize tells libvirt's own error (the disk has no size) from a call
// it left unanswered: given up on, or ended with its connection.
func (l liveDomain) DiskSize(ctx context.Context, disk string) (uint64, bool, error) {
	size, err := l.conn.BlockSize(ctx, l.dom, disk)
	var answered libvirt.Error
	switch {
	case err == nil:
		return size.Capacity, true, nil
	case errors.As(err, &answered):
		return 0, false, nil
	}
	return 0, false, err
}

// StorageRoot is this host's root, or for a QEMU in a pod, its own, read
// from its pid.
func (l liveDomain) StorageRoot() string {
	if !l.conn.Matched() {
		return "/"
	}
	pid, err := libvirtx.QEMUPID(l.conn.Socket(), l.name)
	if err != nil {
		return ""
	}
	return "/proc/" + strconv.Itoa(pid) + "/root"
}
