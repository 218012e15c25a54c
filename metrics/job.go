package metrics

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/api"
)

// JobLabels are the labels of every per-job series, in this order. socket
// is part of a job's identity: the same domain name can be on two libvirt
// sockets of a node (two launcher pods), and two series with the same
// labels would fail the whole scrape.
var JobLabels = []string{"node", "socket", "domain", "role", "namespace", "name"}

// family is one per-job metric: its Def, its Desc for the registry's
// path, and for the text written on the fast path its extra labels and
// its place among the families.
type family struct {
	Def
	desc  *prometheus.Desc
	extra []string
	index int
	// header is the family's HELP and TYPE lines, escaped once.
	header string
}

func jobFamily(name, help string, extra ...string) *family {
	d := define(Def{Name: "ferry_migration_" + name, Type: Gauge, Help: help, Area: AreaJob,
		Labels: append(append([]string{}, JobLabels...), extra...)})
	return &family{Def: d, desc: d.Desc(), extra: extra,
		header: "# HELP " + d.Name + " " + escapeHelp(d.Help) + "\n# TYPE " + d.Name + " " + string(d.Type) + "\n"}
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
	famRecoveryDue   = jobFamily("postcopy_recovery_deadline_timestamp_seconds", "While a broken post-copy Ferry resumes is paused: when it outlasts --postcopy-recovery-timeout and is overdue (Unix seconds; Ferry goes on trying after it).")
	famVMI           = jobFamily("vmi_info", "The KubeVirt VMI of a migrating domain as the API server shows it; always 1.",
		"uid", "migration_uid", "evacuation_node", "eviction_requested")
)

// jobFamilies are all per-job families, in the order they are served.
var jobFamilies = func() []*family {
	fs := []*family{famRemaining, famProcessed, famTotal, famMemRemaining, famDirty, famTransfer, famIteration,
		famPostCopyReqs, famETA, famProgress, famElapsed, famDowntime, famThrottle, famInfo, famQEMUCPU, famQEMUThrottled, famRecoveryDue, famVMI}
	sort.Slice(fs, func(a, b int) bool { return fs[a].Name < fs[b].Name })
	for i, f := range fs {
		f.index = i
	}
	return fs
}()

// jobsCollector is the registry's path to the per-job series, taken for
// formats other than text.
type jobsCollector struct{ c *Collector }

func (j jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range jobFamilies {
		ch <- f.desc
	}
}

func (j jobsCollector) Collect(ch chan<- prometheus.Metric) {
	j.c.collectJobs(ch, j.c.tracker.Snapshot().Jobs)
}

func (c *Collector) collectJobs(ch chan<- prometheus.Metric, jobs []api.Job) {
	for _, j := range jobs {
		l := []string{c.node, j.Socket, j.Domain, string(j.Role), j.Namespace, j.Name}
		c.jobSeries(j, func(f *family, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, v, append(l, extra...)...)
		})
	}
}

// jobSeries says which series a job has, for both ways of serving them.
func (c *Collector) jobSeries(j api.Job, g func(f *family, v float64, extra ...string)) {
	g(famInfo, 1, string(j.Mode), string(j.Phase), string(j.Convergence))
	g(famElapsed, float64(j.ElapsedMs)/1000)
	if c.VMI != nil && j.Namespace != "" {
		if v := c.VMI(j).VMI; v != nil {
			muid, evac := "", v.EvacuationNodeName
			if v.MigrationState != nil {
				muid = v.MigrationState.MigrationUID
			}
			g(famVMI, 1, v.UID, muid, evac, strconv.FormatBool(v.EvictionRequested))
		}
	}
	if rc := j.Recovery; rc != nil && j.Phase == api.PhasePostCopyPaused && !rc.Until.IsZero() {
		g(famRecoveryDue, float64(rc.Until.UnixMilli())/1000)
	}
	if j.Role == api.RoleTarget {
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
