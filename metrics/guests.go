package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/api"
)

// One series per domain holding its guest and per VMI expected here: a
// node of 250 guests serves 250 of each, whose labels change only when a
// guest starts, stops, pauses or moves.
var (
	defActive = define(Def{Name: "ferry_domain_active", Type: Gauge, Area: AreaNode,
		Help:   "Domains holding their guest on this node (1): running, or paused so that a resume runs it, but never the side of a live migration that waits for the other; one uuid on two nodes is one guest running twice.",
		Labels: []string{"node", "socket", "uuid", "domain", "namespace", "name", "vmi_uid", "state"}})
	defExpected = define(Def{Name: "ferry_vmi_expected", Type: Gauge, Area: AreaNode,
		Help:   "KubeVirt VMIs the API server shows Running on this node (status.nodeName), by UID; always 1.",
		Labels: []string{"node", "vmi_uid", "namespace", "name"}})
)

var (
	descActive   = defActive.Desc()
	descExpected = defExpected.Desc()
)

// collectGuests serves the domains that hold their guest here and the
// VMIs the API server expects here, which the alerts hold against each
// other across nodes.
func (c *Collector) collectGuests(ch chan<- prometheus.Metric, doms []api.Domain) {
	for _, d := range doms {
		if !d.HoldsGuest {
			continue
		}
		uid := ""
		if c.VMIUID != nil && d.Namespace != "" {
			uid = c.VMIUID(d.Socket, d.Name, d.UUID)
		}
		ch <- one(descActive, c.node, d.Socket, d.UUID, d.Name, d.Namespace, d.VMI, uid, d.State)
	}
	if c.ExpectedVMIs == nil {
		return
	}
	for _, v := range c.ExpectedVMIs() {
		ch <- one(descExpected, c.node, v.UID, v.Namespace, v.Name)
	}
}

// one is a series of value 1. A domain's name comes from whatever serves
// a libvirt socket: one that is not UTF-8 is left out of the page alone,
// where a panic would take every series after it.
func one(d *prometheus.Desc, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, 1, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}
