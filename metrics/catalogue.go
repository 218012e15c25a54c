package metrics

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Type is a metric's Prometheus type, as the text format's TYPE line
// spells it.
type Type string

const (
	Gauge     Type = "gauge"
	Counter   Type = "counter"
	Histogram Type = "histogram"
)

// Area says which part of ferryd serves a metric.
type Area string

const (
	// AreaJob: one series per in-flight migration job, written from the
	// tracker's snapshot (job.go, text.go).
	AreaJob Area = "job"
	// AreaNode: node-wide series from the tracker, the libvirt sockets and
	// the KubeVirt reporter (node.go).
	AreaNode Area = "node"
	// AreaPolicy: the convergence policy's decisions (policy.go).
	AreaPolicy Area = "policy"
	// AreaProxy: the migration proxy's connections (proxy.go).
	AreaProxy Area = "proxy"
)

// Def is one metric: its name, type, help and variable labels, declared
// once in this package and nowhere else.
type Def struct {
	Name   string
	Type   Type
	Help   string
	Labels []string
	Area   Area
	// Buckets are a histogram's upper bounds.
	Buckets []float64
}

// catalogue holds every Def by name; define fills it as the package's
// variables are initialised.
var catalogue = map[string]Def{}

var (
	validName  = regexp.MustCompile(`^ferry_[a-z0-9_]*[a-z0-9]$`)
	validLabel = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// define declares a metric; a second declaration of a name, a name or
// label Prometheus would refuse, or a help text that is not one sentence
// ending in a full stop is a programming error.
func define(d Def) Def {
	if !validName.MatchString(d.Name) {
		panic(fmt.Sprintf("metrics: invalid name %q", d.Name))
	}
	if _, dup := catalogue[d.Name]; dup {
		panic(fmt.Sprintf("metrics: %s declared twice", d.Name))
	}
	if d.Help == "" || !strings.HasSuffix(d.Help, ".") {
		panic(fmt.Sprintf("metrics: %s: help must be text ending in a full stop", d.Name))
	}
	seen := map[string]bool{}
	for _, l := range d.Labels {
		if !validLabel.MatchString(l) || seen[l] {
			panic(fmt.Sprintf("metrics: %s: invalid or repeated label %q", d.Name, l))
		}
		seen[l] = true
	}
	switch d.Type {
	case Gauge, Counter:
		if len(d.Buckets) > 0 {
			panic(fmt.Sprintf("metrics: %s: buckets on a %s", d.Name, d.Type))
		}
	case Histogram:
		if len(d.Buckets) == 0 {
			panic(fmt.Sprintf("metrics: %s: a histogram without buckets", d.Name))
		}
	default:
		panic(fmt.Sprintf("metrics: %s: unknown type %q", d.Name, d.Type))
	}
	if d.Type == Counter && !strings.HasSuffix(d.Name, "_total") {
		panic(fmt.Sprintf("metrics: counter %s must end in _total", d.Name))
	}
	d.Labels = append([]string(nil), d.Labels...)
	catalogue[d.Name] = d
	return d
}

// Catalogue lists every metric ferryd can export, sorted by name. The
// generated docs/metrics.md and the tests of deploy/'s alerts and
// dashboard read it.
func Catalogue() []Def {
	out := make([]Def, 0, len(catalogue))
	for _, d := range catalogue {
		d.Labels = append([]string(nil), d.Labels...)
		d.Buckets = append([]float64(nil), d.Buckets...)
		out = append(out, d)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// Lookup finds a metric by name. A histogram's _bucket, _sum and _count
// series are found as the histogram.
func Lookup(name string) (Def, bool) {
	if d, ok := catalogue[name]; ok {
		return d, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if d, ok := catalogue[base]; ok && d.Type == Histogram {
				return d, true
			}
		}
	}
	return Def{}, false
}

// Desc is the metric's descriptor for a collector's const metrics.
func (d Def) Desc() *prometheus.Desc {
	return prometheus.NewDesc(d.Name, d.Help, d.Labels, nil)
}

// counterVec, gaugeVec and histogramVec build the live vector of a
// metric whose state another package keeps.
func (d Def) counterVec() *prometheus.CounterVec {
	d.must(Counter)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.Name, Help: d.Help}, d.Labels)
}

func (d Def) gaugeVec() *prometheus.GaugeVec {
	d.must(Gauge)
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: d.Name, Help: d.Help}, d.Labels)
}

func (d Def) histogramVec() *prometheus.HistogramVec {
	d.must(Histogram)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: d.Buckets}, d.Labels)
}

func (d Def) must(t Type) {
	if d.Type != t {
		panic(fmt.Sprintf("metrics: %s is a %s, not a %s", d.Name, d.Type, t))
	}
}
