package daemon

import (
	"fmt"
	"net/http"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// socket is part of a job's identity: the same domain name can be on two
// libvirt sockets of a node (two launcher pods), and two series with the
// same labels would fail the whole scrape.
var jobLabels = []string{"node", "socket", "domain", "role", "namespace", "name"}

func jobDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc("ferry_migration_"+name, help, append(append([]string{}, jobLabels...), extra...), nil)
}

var (
	descRemaining     = jobDesc("data_remaining_bytes", "Bytes libvirt still has to send (memory and disks).")
	descProcessed     = jobDesc("data_processed_bytes", "Bytes sent so far (memory and disks).")
	descTotal         = jobDesc("data_total_bytes", "Total bytes to send as libvirt currently estimates it.")
	descMemRemaining  = jobDesc("memory_remaining_bytes", "Guest memory bytes still to send.")
	descDirty         = jobDesc("dirty_rate_bytes_per_second", "Rate at which the guest dirties memory, as measured by QEMU.")
	descTransfer      = jobDesc("transfer_rate_bytes_per_second", "Rate at which memory is sent to the target.")
	descIteration     = jobDesc("iteration", "Current pass over guest memory (pre-copy iteration).")
	descPostCopyReqs  = jobDesc("postcopy_requests", "Pages the target has requested from the source during post-copy.")
	descETA           = jobDesc("eta_seconds", "Estimated seconds until the migration completes; absent when it is not converging.")
	descProgress      = jobDesc("progress_ratio", "Share of data sent, capped at 0.99 until libvirt reports completion.")
	descElapsed       = jobDesc("elapsed_seconds", "Seconds since the migration job started.")
	descDowntime      = jobDesc("expected_downtime_seconds", "Downtime libvirt expects for the final stop-and-copy.")
	descThrottle      = jobDesc("auto_converge_throttle_ratio", "Guest CPU throttle applied by auto-converge.")
	descInfo          = jobDesc("info", "Migration state as labels; always 1.", "mode", "phase", "convergence")
	descQEMUCPU       = jobDesc("qemu_cpu_usage_ratio", "CPU the source or target QEMU process uses, in cores, from its cgroup.")
	descQEMUThrottled = jobDesc("qemu_cpu_throttled_seconds", "Seconds the QEMU process's cgroup was CPU-throttled during the job.")
	descTotals        = prometheus.NewDesc("ferry_migrations_total", "Migration jobs that ended on this node, by role and result.",
		[]string{"node", "role", "result"}, nil)
	descLibvirtUp = prometheus.NewDesc("ferry_libvirt_up", "Whether ferryd is connected to the libvirt socket.",
		[]string{"node", "socket"}, nil)
	descGlobMatches = prometheus.NewDesc("ferry_libvirt_socket_glob_matches", "Sockets the libvirt socket glob matches now; 0 for long on a node running VMs means a wrong --kubelet-root or mount.",
		[]string{"node", "glob"}, nil)
	descAttention = prometheus.NewDesc("ferry_domain_attention", "Domains in a state an operator must act on (1 while it lasts).",
		[]string{"node", "socket", "domain", "namespace", "name", "reason"}, nil)
	descBuild = prometheus.NewDesc("ferry_build_info", "ferryd build information; always 1.", []string{"version", "goversion"}, nil)
	descVMI   = jobDesc("vmi_info", "The KubeVirt VMI of a migrating domain as the API server shows it; always 1.",
		"uid", "migration_uid", "evacuation_node", "eviction_requested")
	descMarksPending = prometheus.NewDesc("ferry_vmi_marks_pending", "VMI marks (post-copy failures, Events) not yet delivered to the API server.",
		[]string{"node"}, nil)
	descMarksDone = prometheus.NewDesc("ferry_vmi_marks_total", "VMI marks done, by outcome: marked, already_marked (by the other node), event, vmi_gone, uid_mismatch, pod_mismatch (a socket of a pod not among the VMI's active pods), refused (400/403/422 from the API server; not retried).",
		[]string{"node", "outcome"}, nil)
)

// metricsHandler serves the registry; one bad series must not blank the
// page, since alerts on every other series would go quiet with it.
func metricsHandler(reg *prometheus.Registry, log *zap.Logger) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(log), ErrorHandling: promhttp.ContinueOnError})
}

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
	for _, d := range []*prometheus.Desc{descRemaining, descProcessed, descTotal, descMemRemaining, descDirty, descTransfer,
		descIteration, descPostCopyReqs, descETA, descProgress, descElapsed, descDowntime, descThrottle, descInfo,
		descQEMUCPU, descQEMUThrottled, descTotals, descLibvirtUp, descGlobMatches, descAttention, descBuild, descVMI, descMarksPending, descMarksDone} {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.tracker.Snapshot()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, j := range snap.Jobs {
		l := []string{c.node, j.Socket, j.Domain, string(j.Role), j.Namespace, j.Name}
		g(descInfo, 1, append(l, string(j.Mode), string(j.Phase), string(j.Convergence))...)
		g(descElapsed, float64(j.ElapsedMs)/1000, l...)
		if c.vmi != nil && j.Namespace != "" {
			if v := c.vmi(j).VMI; v != nil {
				muid, evac := "", v.EvacuationNodeName
				if v.MigrationState != nil {
					muid = v.MigrationState.MigrationUID
				}
				g(descVMI, 1, append(l, v.UID, muid, evac, fmt.Sprint(v.EvictionRequested))...)
			}
		}
		if j.Role == migration.RoleTarget {
			// libvirt gives no statistics on the target side.
			continue
		}
		g(descRemaining, float64(j.DataRemainingBytes), l...)
		g(descProcessed, float64(j.DataProcessedBytes), l...)
		g(descTotal, float64(j.DataTotalBytes), l...)
		g(descMemRemaining, float64(j.MemoryRemainingBytes), l...)
		g(descDirty, float64(j.DirtyRateBytesPerSecond), l...)
		g(descTransfer, float64(j.TransferRateBytesPerSecond), l...)
		g(descIteration, float64(j.Iteration), l...)
		g(descPostCopyReqs, float64(j.PostCopyRequests), l...)
		g(descProgress, j.ProgressPercent/100, l...)
		g(descDowntime, float64(j.ExpectedDowntimeMs)/1000, l...)
		g(descThrottle, float64(j.AutoConvergeThrottle)/100, l...)
		if j.EtaSeconds != nil {
			g(descETA, *j.EtaSeconds, l...)
		}
		if q := j.QEMU; q != nil {
			g(descQEMUCPU, q.CPUPercent/100, l...)
			g(descQEMUThrottled, q.ThrottledSeconds, l...)
		}
	}
	for t, n := range snap.Totals {
		ch <- prometheus.MustNewConstMetric(descTotals, prometheus.CounterValue, float64(n), c.node, string(t.Role), t.Result)
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
