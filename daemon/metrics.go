package daemon

import (
	"runtime"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// socket is part of a job's identity: the same domain name can be on two
// libvirt sockets of a node (two launcher pods), and two series with the
// same labels would fail the whole scrape.
var jobLabels = []string{"node", "socket", "domain", "role", "namespace", "name"}

// family is one per-job metric: its Desc for the registry, its name, help
// and extra labels for the text served on the fast path.
type family struct {
	desc        *prometheus.Desc
	name, help  string
	extraLabels []string
	index       int
}

func jobFamily(name, help string, extra ...string) *family {
	full := "ferry_migration_" + name
	return &family{desc: prometheus.NewDesc(full, help, append(append([]string{}, jobLabels...), extra...), nil),
		name: full, help: help, extraLabels: extra}
}

// jobFamilies are all per-job families, in the order they are served.
var jobFamilies []*family

func init() {
	for _, f := range []*family{famRemaining, famProcessed, famTotal, famMemRemaining, famDirty, famTransfer, famIteration,
		famPostCopyReqs, famETA, famProgress, famElapsed, famDowntime, famThrottle, famInfo, famQEMUCPU, famQEMUThrottled, famVMI} {
		jobFamilies = append(jobFamilies, f)
	}
	sort.Slice(jobFamilies, func(a, b int) bool { return jobFamilies[a].name < jobFamilies[b].name })
	for i, f := range jobFamilies {
		f.index = i
	}
}

var (
	famRemaining     = jobFamily("data_remaining_bytes", "Bytes libvirt still has to send (memory and disks).")
	famProcessed     = jobFamily("data_processed_bytes", "Bytes sent so far (memory and disks).")
	famTotal         = jobFamily("data_total_bytes", "Total bytes to send as libvirt currently estimates it.")
	famMemRemaining  = jobFamily("memory_remaining_bytes", "Guest memory bytes still to send.")
	famDirty         = jobFamily("dirty_rate_bytes_per_second", "Rate at which the guest dirties memory, as measured by QEMU.")
	famTransfer      = jobFamily("transfer_rate_bytes_per_second", "Rate at which memory is sent to the target.")
	famIteration     = jobFamily("iteration", "Current pass over guest memory (pre-copy iteration).")
	famPostCopyReqs  = jobFamily("postcopy_requests", "Pages the target has requested from the source during post-copy.")
	famETA           = jobFamily("eta_seconds", "Estimated seconds until the migration completes; absent when it is not converging.")
	famProgress      = jobFamily("progress_ratio", "Share of data sent, never decreasing across passes over memory, capped at 0.99 until libvirt reports completion.")
	famElapsed       = jobFamily("elapsed_seconds", "Seconds since the migration job started.")
	famDowntime      = jobFamily("expected_downtime_seconds", "Downtime libvirt expects for the final stop-and-copy.")
	famThrottle      = jobFamily("auto_converge_throttle_ratio", "Guest CPU throttle applied by auto-converge.")
	famInfo          = jobFamily("info", "Migration state as labels; always 1.", "mode", "phase", "convergence")
	famQEMUCPU       = jobFamily("qemu_cpu_usage_ratio", "CPU the source or target QEMU process uses, in cores, from its cgroup.")
	famQEMUThrottled = jobFamily("qemu_cpu_throttled_seconds", "Seconds the QEMU process's most throttled cgroup (the domain's, or its vCPU or emulator group) was CPU-throttled during the job.")
	famVMI           = jobFamily("vmi_info", "The KubeVirt VMI of a migrating domain as the API server shows it; always 1.",
		"uid", "migration_uid", "evacuation_node", "eviction_requested")
)

var (
	descTotals = prometheus.NewDesc("ferry_migrations_total", "Migration jobs that ended on this node, by role and result, and for failed, aborted and post-copy-failed jobs by failure plane and class.",
		[]string{"node", "role", "result", "plane", "class"}, nil)
	descRecoveryAttempts = prometheus.NewDesc("ferry_migration_postcopy_recovery_attempts_total", "Attempts to resume a broken post-copy migration Ferry drives, by result: resumed (QEMU's stream ran again) or failed.",
		[]string{"node", "result"}, nil)
	descLibvirtUp = prometheus.NewDesc("ferry_libvirt_up", "Whether ferryd is connected to the libvirt socket.",
		[]string{"node", "socket"}, nil)
	descGlobMatches = prometheus.NewDesc("ferry_libvirt_socket_glob_matches", "Sockets the libvirt socket glob matches now; 0 for long on a node running VMs means a wrong --kubelet-pods-dir or mount.",
		[]string{"node", "glob"}, nil)
	descAttention = prometheus.NewDesc("ferry_domain_attention", "Domains in a state an operator must act on (1 while it lasts).",
		[]string{"node", "socket", "domain", "namespace", "name", "reason"}, nil)
	descBuild        = prometheus.NewDesc("ferry_build_info", "ferryd build information; always 1.", []string{"version", "goversion"}, nil)
	descMarksPending = prometheus.NewDesc("ferry_vmi_marks_pending", "VMI marks (post-copy failures, Events) not yet delivered to the API server.",
		[]string{"node"}, nil)
	descMarksDone = prometheus.NewDesc("ferry_vmi_marks_total", "VMI marks done, by outcome: marked, already_marked (by the other node), event, vmi_gone, uid_mismatch, no_vmi_uid (the domain carries no KubeVirt metadata), pod_mismatch (a socket of a pod not among the VMI's active pods), refused (400/403/422 from the API server; not retried).",
		[]string{"node", "outcome"}, nil)
)

// Collector serves Ferry's metrics from the tracker's in-memory snapshot;
// a scrape never calls libvirt, so a migration holding libvirt's state lock
// cannot slow or block it.
type Collector struct {
	node, version string
	tracker       *migration.Tracker
	pool          *libvirtx.Pool
	// vmi and pending are set when KubeVirt reporting is on.
	vmi       func(migration.Job) migration.Job
	pending   func() int
	delivered func() map[string]int
}

// NewCollector builds the collector; pool may be nil.
func NewCollector(node, version string, t *migration.Tracker, p *libvirtx.Pool) *Collector {
	return &Collector{node: node, version: version, tracker: t, pool: p}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	nodeCollector{c}.Describe(ch)
	jobsCollector{c}.Describe(ch)
}

// Collect is the registry's path to all of Ferry's series, still taken
// when a scraper asks for another format than the text one.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.tracker.Snapshot()
	c.collectNode(ch, snap)
	c.collectJobs(ch, snap.Jobs)
}

// nodeCollector and jobsCollector split the Collector: ferryd's registry
// holds the node-wide series, and the per-job ones (most of a page with
// many migrations) are written as text straight from the snapshot.
type nodeCollector struct{ c *Collector }

func (n nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTotals, descRecoveryAttempts, descLibvirtUp, descGlobMatches, descAttention, descBuild, descMarksPending, descMarksDone} {
		ch <- d
	}
}

func (n nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n.c.collectNode(ch, n.c.tracker.Snapshot())
}

type jobsCollector struct{ c *Collector }

func (j jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range jobFamilies {
		ch <- f.desc
	}
}

func (j jobsCollector) Collect(ch chan<- prometheus.Metric) {
	j.c.collectJobs(ch, j.c.tracker.Snapshot().Jobs)
}

func (c *Collector) collectJobs(ch chan<- prometheus.Metric, jobs []migration.Job) {
	for _, j := range jobs {
		l := []string{c.node, j.Socket, j.Domain, string(j.Role), j.Namespace, j.Name}
		c.jobSeries(j, func(f *family, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, v, append(l, extra...)...)
		})
	}
}

// jobSeries says which series a job has, for both ways of serving them.
func (c *Collector) jobSeries(j migration.Job, g func(f *family, v float64, extra ...string)) {
	g(famInfo, 1, string(j.Mode), string(j.Phase), string(j.Convergence))
	g(famElapsed, float64(j.ElapsedMs)/1000)
	if c.vmi != nil && j.Namespace != "" {
		if v := c.vmi(j).VMI; v != nil {
			muid, evac := "", v.EvacuationNodeName
			if v.MigrationState != nil {
				muid = v.MigrationState.MigrationUID
			}
			g(famVMI, 1, v.UID, muid, evac, strconv.FormatBool(v.EvictionRequested))
		}
	}
	if j.Role == migration.RoleTarget {
		// libvirt gives no statistics on the target side.
		return
	}
	g(famRemaining, float64(j.DataRemainingBytes))
	g(famProcessed, float64(j.DataProcessedBytes))
	g(famTotal, float64(j.DataTotalBytes))
	g(famMemRemaining, float64(j.MemoryRemainingBytes))
	g(famDirty, float64(j.DirtyRateBytesPerSecond))
	g(famTransfer, float64(j.TransferRateBytesPerSecond))
	g(famIteration, float64(j.Iteration))
	g(famPostCopyReqs, float64(j.PostCopyRequests))
	g(famProgress, j.ProgressPercent/100)
	g(famDowntime, float64(j.ExpectedDowntimeMs)/1000)
	g(famThrottle, float64(j.AutoConvergeThrottle)/100)
	if j.EtaSeconds != nil {
		g(famETA, *j.EtaSeconds)
	}
	if q := j.QEMU; q != nil {
		g(famQEMUCPU, q.CPUPercent/100)
		g(famQEMUThrottled, q.ThrottledSeconds)
	}
}

func (c *Collector) collectNode(ch chan<- prometheus.Metric, snap migration.Snapshot) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for t, n := range snap.Totals {
		ch <- prometheus.MustNewConstMetric(descTotals, prometheus.CounterValue, float64(n), c.node, string(t.Role), t.Result, string(t.Plane), string(t.Class))
	}
	for result, n := range snap.RecoveryAttempts {
		ch <- prometheus.MustNewConstMetric(descRecoveryAttempts, prometheus.CounterValue, float64(n), c.node, result)
	}
	for _, d := range snap.Domains {
		if d.Attention != "" {
			g(descAttention, 1, c.node, d.Socket, d.Name, d.Namespace, d.VMI, d.AttentionReason)
		}
	}
	if c.pool != nil {
		for _, s := range c.pool.Status() {
			up := 0.0
			if s.Up {
				up = 1
			}
			g(descLibvirtUp, up, c.node, s.Socket)
		}
		if gs, ok := c.pool.GlobStatus(); ok {
			g(descGlobMatches, float64(gs.Matches), c.node, gs.Glob)
		}
	}
	g(descBuild, 1, c.version, runtime.Version())
	if c.pending != nil {
		g(descMarksPending, float64(c.pending()), c.node)
	}
	if c.delivered != nil {
		for outcome, n := range c.delivered() {
			ch <- prometheus.MustNewConstMetric(descMarksDone, prometheus.CounterValue, float64(n), c.node, outcome)
		}
	}
}
