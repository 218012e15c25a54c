package evacuate

import (
	"context"
	"fmt"
	"slices"

	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/preflight"
)

// Libvirt is what checks and plans ask of the libvirt daemons the node's
// domains run under. The daemon answers it over its pool: evacuate/ never
// reaches libvirt itself.
type Libvirt interface {
	// Domain finds the live domain name on socket, or on whichever libvirt
	// runs it when socket is "". Its errors are the tracker's (no such
	// domain, two of that name) or the pool's (that libvirt is not
	// connected).
	Domain(socket, name string) (LiveDomain, error)
	// Launcher says whether socket is a KubeVirt launcher's libvirt.
	Launcher(socket string) bool
	// RefusedFeatures names what of a domain XML no Ferry target takes,
	// whatever its options.
	RefusedFeatures(domXML string) []string
	// TimedOut says whether err is a call libvirt left unanswered in time.
	TimedOut(err error) bool
}

// LiveDomain is a running domain, as its libvirt answers of it.
type LiveDomain interface {
	// Socket is the libvirt socket it runs under.
	Socket() string
	// XML is its live XML.
	XML(ctx context.Context) (string, error)
	// DiskSize is the capacity of its disk (named by target). An error
	// libvirt answered is no error here, only an unknown size: some disks
	// have none. err is a call libvirt left unanswered: given up on, or
	// ended with its connection.
	DiskSize(ctx context.Context, disk string) (capacity uint64, known bool, err error)
	// StorageRoot is where its disk paths resolve: this host's root, or
	// for a QEMU in a pod, its own; "" when that cannot be told.
	StorageRoot() string
}

// running is libvirt's name of a running domain's state, as the tracker
// lists it: only such a guest is checked, or live-migrated.
const running = "running"

// CheckConfig is what a Checker is given.
type CheckConfig struct {
	// Node is this node's name.
	Node string
	// NodeSockets are the node's own libvirt sockets: a guest there may
	// be moved by Ferry, and so is checked against what its targets take.
	NodeSockets []string
	Libvirt     Libvirt
}

// Checker tells what keeps a domain on this node.
type Checker struct {
	cfg CheckConfig
	// listChecks bounds the checks domain lists make at once, across
	// requests.
	listChecks chan struct{}
}

// NewChecker returns a Checker reading domains through cfg.Libvirt.
func NewChecker(cfg CheckConfig) *Checker {
	return &Checker{cfg: cfg, listChecks: make(chan struct{}, listChecksAtOnce)}
}

// Check reads what the live domain holds that keeps it on this node,
// with each local disk's storage and size (as far as libvirt answers it
// in time).
func (c *Checker) Check(ctx context.Context, socket, name string) (api.CheckResponse, error) {
	resp, _, err := c.inspect(ctx, socket, name, false)
	return resp, err
}

// inspect is Check, quick without disk sizes, that also names the disk
// whose size the domain's libvirt left unanswered in time ("" if none): a
// plan does not take such a domain as measured.
func (c *Checker) inspect(ctx context.Context, socket, name string, quick bool) (resp api.CheckResponse, unsized string, err error) {
	dom, err := c.cfg.Libvirt.Domain(socket, name)
	if err != nil {
		return api.CheckResponse{}, "", err
	}
	xml, err := dom.XML(ctx)
	if err != nil {
		return api.CheckResponse{}, "", err
	}
	var def libvirtxml.Domain
	if err := def.Unmarshal(xml); err != nil {
		return api.CheckResponse{}, "", fmt.Errorf("the live XML of %s: %w", name, err)
	}
	blockers := preflight.Reasons(&def)
	if slices.Contains(c.cfg.NodeSockets, dom.Socket()) && !blocked(blockers) {
		// A guest of the node's own libvirt may be moved by Ferry (a
		// launcher's is KubeVirt's to move), unless it cannot move at all.
		for _, what := range c.cfg.Libvirt.RefusedFeatures(xml) {
			blockers = append(blockers, preflight.FerryTargetRefuses(what))
		}
	}
	if !quick {
		unsized = askSizes(ctx, dom, blockers)
	}
	judgeLocalDisks(ctx, dom, &def, blockers)
	// What blocks first, as preflight orders it; a disk judged since may
	// have moved.
	slices.SortStableFunc(blockers, func(a, b api.Blocker) int { return severityRank(a.Severity) - severityRank(b.Severity) })
	resp = api.CheckResponse{Node: c.cfg.Node, Domain: name, Migratable: true, Blockers: blockers}
	for _, b := range resp.Blockers {
		if b.Severity == api.SeverityBlocks {
			resp.Migratable = false
		}
	}
	return resp, unsized, nil
}

// judgeLocalDisks settles the storage of each local disk a migration
// would have to copy.
func judgeLocalDisks(ctx context.Context, dom LiveDomain, def *libvirtxml.Domain, blockers []api.Blocker) {
	disks := map[string]preflight.Disk{}
	for _, disk := range preflight.LocalDisks(def) {
		disks[disk.Target] = disk
	}
	root := dom.StorageRoot()
	for i := range blockers {
		b := &blockers[i]
		if b.Code == preflight.CodeLocalDisk && !disks[b.Device].Uncopied {
			judgeStorage(ctx, b, root)
		}
	}
}

func severityRank(s api.Severity) int {
	if s == api.SeverityBlocks {
		return 0
	}
	return 1
}

// blocked says whether any of blockers keeps the domain here.
func blocked(blockers []api.Blocker) bool {
	return slices.ContainsFunc(blockers, func(b api.Blocker) bool { return b.Severity == api.SeverityBlocks })
}
