package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

var (
	defTotals = define(Def{Name: "ferry_migrations_total", Type: Counter, Area: AreaNode,
		Help:   "Migration jobs that ended on this node, by role and result, and for failed, aborted and post-copy-failed jobs by failure plane and class.",
		Labels: []string{"node", "role", "result", "plane", "class"}})
	defRecoveryAttempts = define(Def{Name: "ferry_migration_postcopy_recovery_attempts_total", Type: Counter, Area: AreaNode,
		Help:   "Attempts to resume a broken post-copy migration Ferry drives, by result: resumed (QEMU's stream ran again) or failed.",
		Labels: []string{"node", "result"}})
	defLibvirtUp = define(Def{Name: "ferry_libvirt_up", Type: Gauge, Area: AreaNode,
		Help:   "Whether ferryd is connected to the libvirt socket.",
		Labels: []string{"node", "socket"}})
	defGlobMatches = define(Def{Name: "ferry_libvirt_socket_glob_matches", Type: Gauge, Area: AreaNode,
		Help:   "Sockets the libvirt socket glob matches now; 0 for long on a node running VMs means a wrong --kubelet-pods-dir or mount.",
		Labels: []string{"node", "glob"}})
	defAttention = define(Def{Name: "ferry_domain_attention", Type: Gauge, Area: AreaNode,
		Help:   "Domains in a state an operator must act on (1 while it lasts).",
		Labels: []string{"node", "socket", "domain", "namespace", "name", "reason"}})
	defDirtyRate = define(Def{Name: "ferry_domain_dirty_rate_bytes_per_second", Type: Gauge, Area: AreaNode,
		Help:   "How fast the guest dirties its memory: the median of its last five measurements by QEMU (ferryd --dirty-rate-period), taken while it did not migrate.",
		Labels: []string{"node", "socket", "domain", "namespace", "name"}})
	defSlots = define(Def{Name: "ferry_migration_slots", Type: Gauge, Area: AreaNode,
		Help:   "Migrations Ferry drives that this node runs at once, by direction (outbound: --outbound-migrations; inbound: --inbound-migrations).",
		Labels: []string{"node", "direction"}})
	defSlotsUsed = define(Def{Name: "ferry_migration_slots_used", Type: Gauge, Area: AreaNode,
		Help:   "Slots taken now by migrations Ferry drives, by direction.",
		Labels: []string{"node", "direction"}})
	defSlotsHung = define(Def{Name: "ferry_migration_slots_hung", Type: Gauge, Area: AreaNode,
		Help:   "Migrations Ferry drives out of this node that wait on its libvirtd, which does not answer their connection (libvirt keepalive): they keep their slot, since libvirt may yet go on.",
		Labels: []string{"node"}})
	defQueued = define(Def{Name: "ferry_migration_queued", Type: Gauge, Area: AreaNode,
		Help:   "Migrations Ferry drives that wait for an outbound slot of this node.",
		Labels: []string{"node"}})
	defEvacuation = define(Def{Name: "ferry_node_evacuation_seconds", Type: Gauge, Area: AreaNode,
		Help:   "How long the last plan of this node's evacuation (ferryctl plan, evacuate) predicted it takes.",
		Labels: []string{"node"}})
	defBuild = define(Def{Name: "ferry_build_info", Type: Gauge, Area: AreaNode,
		Help:   "ferryd build information; always 1.",
		Labels: []string{"version", "goversion"}})
	defMarksPending = define(Def{Name: "ferry_vmi_marks_pending", Type: Gauge, Area: AreaNode,
		Help:   "VMI marks (post-copy failures, Events) not yet delivered to the API server.",
		Labels: []string{"node"}})
	defMarksDone = define(Def{Name: "ferry_vmi_marks_total", Type: Counter, Area: AreaNode,
		Help:   "VMI marks done, by outcome: marked, already_marked (by the other node), event, vmi_gone, uid_mismatch, no_vmi_uid (the domain carries no KubeVirt metadata), pod_mismatch (a socket of a pod not among the VMI's active pods), refused (400/403/422 from the API server; not retried); marks taken off: unmarked, not_marked, superseded; a post-copy recovery's annotation: recovery, recovery_not_shown.",
		Labels: []string{"node", "outcome"}})
)

var (
	descTotals           = defTotals.Desc()
	descRecoveryAttempts = defRecoveryAttempts.Desc()
	descLibvirtUp        = defLibvirtUp.Desc()
	descGlobMatches      = defGlobMatches.Desc()
	descAttention        = defAttention.Desc()
	descBuild            = defBuild.Desc()
	descDirtyRate        = defDirtyRate.Desc()
	descSlots            = defSlots.Desc()
	descSlotsUsed        = defSlotsUsed.Desc()
	descSlotsHung        = defSlotsHung.Desc()
	descQueued           = defQueued.Desc()
	descEvacuation       = defEvacuation.Desc()
	descMarksPending     = defMarksPending.Desc()
	descMarksDone        = defMarksDone.Desc()
)

// Sockets is what the collector reads of the libvirt sockets ferryd
// watches; *libvirtx.Pool is one.
type Sockets interface {
	Status() []libvirtx.SocketStatus
	GlobStatus() (libvirtx.GlobStatus, bool)
}

// Collector serves Ferry's metrics from the tracker's in-memory snapshot;
// a scrape never calls libvirt, so a migration holding libvirt's state lock
// cannot slow or block it.
type Collector struct {
	node, version string
	tracker       *migration.Tracker
	sockets       Sockets

	// VMI, MarksPending and MarksDelivered are set when KubeVirt
	// reporting is on: a job with its VMI as the API server shows it, the
	// marks not yet delivered, and those done by outcome.
	VMI            func(api.Job) api.Job
	MarksPending   func() int
	MarksDelivered func() map[string]int
	// DirtyRates, when set, are the domains' last measured dirty rates
	// in bytes per second, by socket and domain.
	DirtyRates func() map[DomainKey]uint64
	// Slots, when set, are the node's slots for the migrations Ferry
	// drives; Evacuation the last plan's predicted seconds, ok=false
	// before any plan.
	Slots      func() []SlotUse
	Evacuation func() (seconds float64, ok bool)
	// VMIUID, when set, is the VMI UID in a KubeVirt domain's metadata,
	// "" until read; ExpectedVMIs the VMIs the API server shows Running
	// on this node.
	VMIUID       func(socket, domain, uuid string) string
	ExpectedVMIs func() []api.VMIInfo
	// LibvirtCalls, when set, counts the calls sent to libvirt by
	// operation (libvirtx.Calls).
	LibvirtCalls func() map[string]uint64
}

// SlotUse is one direction's slots: how many, how many taken, and how
// many migrations wait for one (outbound only: an inbound one waits on its
// source).
type SlotUse struct {
	Direction               string
	Max, Used, Queued, Hung int
}

// DomainKey names a domain by its libvirt socket and name.
type DomainKey struct{ Socket, Domain string }

// NewCollector builds the collector; sockets may be nil (an untyped nil:
// a nil *libvirtx.Pool in the interface would be called).
func NewCollector(node, version string, t *migration.Tracker, sockets Sockets) *Collector {
	return &Collector{node: node, version: version, tracker: t, sockets: sockets}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.Node().Describe(ch)
	jobsCollector{c}.Describe(ch)
}

// Collect is the registry's path to all of Ferry's series, still taken
// when a scraper asks for another format than the text one.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.tracker.Snapshot()
	c.collectNode(ch, snap)
	c.collectJobs(ch, snap.Jobs)
}

// Node is the node-wide part of the collector, for ferryd's registry: the
// per-job series (most of a page with many migrations) are written as
// text straight from the snapshot by the Handler.
func (c *Collector) Node() prometheus.Collector { return nodeCollector{c} }

type nodeCollector struct{ c *Collector }

func (n nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTotals, descRecoveryAttempts, descLibvirtUp, descGlobMatches, descAttention, descBuild, descMarksPending, descMarksDone, descDirtyRate, descSlots, descSlotsUsed, descSlotsHung, descQueued, descEvacuation} {
		ch <- d
	}
	ch <- descActive
	ch <- descExpected
	ch <- descLibvirtUnresponsive
	ch <- descLibvirtCalls
}

func (n nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n.c.collectNode(ch, n.c.tracker.Snapshot())
}

func (c *Collector) collectNode(ch chan<- prometheus.Metric, snap migration.Snapshot) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for t, n := range snap.Totals {
		ch <- prometheus.MustNewConstMetric(descTotals, prometheus.CounterValue, float64(n), c.node, string(t.Role), t.Result, string(t.Plane), string(t.Class))
	}
	if c.LibvirtCalls != nil {
		for op, n := range c.LibvirtCalls() {
			ch <- prometheus.MustNewConstMetric(descLibvirtCalls, prometheus.CounterValue, float64(n), c.node, op)
		}
	}
	for result, n := range snap.RecoveryAttempts {
		ch <- prometheus.MustNewConstMetric(descRecoveryAttempts, prometheus.CounterValue, float64(n), c.node, result)
	}
	var rates map[DomainKey]uint64
	if c.DirtyRates != nil {
		rates = c.DirtyRates()
	}
	for _, d := range snap.Domains {
		if d.Attention != "" {
			g(descAttention, 1, c.node, d.Socket, d.Name, d.Namespace, d.VMI, d.AttentionReason)
		}
		if r, ok := rates[DomainKey{d.Socket, d.Name}]; ok {
			g(descDirtyRate, float64(r), c.node, d.Socket, d.Name, d.Namespace, d.VMI)
		}
	}
	c.collectGuests(ch, snap.Domains)
	if c.sockets != nil {
		for _, s := range c.sockets.Status() {
			up := 0.0
			if s.Up {
				up = 1
			}
			g(descLibvirtUp, up, c.node, s.Socket)
			g(descLibvirtUnresponsive, unresponsiveSeconds(s), c.node, s.Socket)
		}
		if gs, ok := c.sockets.GlobStatus(); ok {
			g(descGlobMatches, float64(gs.Matches), c.node, gs.Glob)
		}
	}
	g(descBuild, 1, c.version, runtime.Version())
	if c.Slots != nil {
		for _, u := range c.Slots() {
			g(descSlots, float64(u.Max), c.node, u.Direction)
			g(descSlotsUsed, float64(u.Used), c.node, u.Direction)
			if u.Direction == "outbound" {
				g(descQueued, float64(u.Queued), c.node)
				g(descSlotsHung, float64(u.Hung), c.node)
			}
		}
	}
	if c.Evacuation != nil {
		if secs, ok := c.Evacuation(); ok {
			g(descEvacuation, secs, c.node)
		}
	}
	if c.MarksPending != nil {
		g(descMarksPending, float64(c.MarksPending()), c.node)
	}
	if c.MarksDelivered != nil {
		for outcome, n := range c.MarksDelivered() {
			ch <- prometheus.MustNewConstMetric(descMarksDone, prometheus.CounterValue, float64(n), c.node, outcome)
		}
	}
}
