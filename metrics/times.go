package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/migration"
)

var (
	// From the few milliseconds of an idle guest's switch-over to the
	// tens of seconds of one stopped to copy what it dirtied.
	defDowntime = define(Def{Name: "ferry_migration_downtime_seconds", Type: Histogram, Area: AreaNode,
		Help:    "How long each ended migration job stopped the guest, by role and result, from libvirt's completed-job statistics (downtime); jobs libvirt kept none of are left out.",
		Labels:  []string{"node", "role", "result"},
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}})
	// From a small guest's seconds to an hour-long pre-copy.
	defDuration = define(Def{Name: "ferry_migration_duration_seconds", Type: Histogram, Area: AreaNode,
		Help:    "How long each ended migration job took, by role and result, from libvirt's completed-job statistics (time_elapsed); jobs libvirt kept none of are left out.",
		Labels:  []string{"node", "role", "result"},
		Buckets: []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600}})
)

// Times are the histograms of ended migrations' downtime and duration.
// The tracker keeps no histogram: it hands each ended job's times, once,
// to Observe (migration.Config.OnTimes).
type Times struct {
	node               string
	downtime, duration *prometheus.HistogramVec
}

// NewTimes builds the histograms of node and registers them with reg
// unless reg is nil.
func NewTimes(node string, reg prometheus.Registerer) *Times {
	t := &Times{node: node, downtime: defDowntime.histogramVec(), duration: defDuration.histogramVec()}
	if reg != nil {
		reg.MustRegister(t.downtime, t.duration)
	}
	return t
}

// Observe counts one ended job's times; a figure libvirt did not give
// (zero) is not observed.
func (t *Times) Observe(e migration.EndedTimes) {
	if e.Downtime > 0 {
		t.downtime.WithLabelValues(t.node, string(e.Role), e.Result).Observe(e.Downtime.Seconds())
	}
	if e.Duration > 0 {
		t.duration.WithLabelValues(t.node, string(e.Role), e.Result).Observe(e.Duration.Seconds())
	}
}
