package proxy

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	bytes    *prometheus.CounterVec
	conns    *prometheus.GaugeVec
	rejected *prometheus.CounterVec
	dial     *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_proxy_bytes_total",
			Help: "Bytes relayed by the migration proxy, by stream and direction (to_target or from_target).",
		}, []string{"stream", "direction"}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ferry_proxy_connections",
			Help: "Open relayed connections, by stream and by this node's side of the migration.",
		}, []string{"stream", "side"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_proxy_rejected_total",
			Help: "Connections and migrations the proxy refused, by reason.",
		}, []string{"reason"}),
		dial: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ferry_proxy_dial_duration_seconds",
			Help:    "Time to set up a relayed connection: to the peer proxy (TCP, TLS, header, answer) or to the local socket.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"leg"}),
	}
	for _, r := range []string{"malformed_header", "unsupported_version", "header_timeout", "tls_handshake",
		"unknown_migration", "expired_migration", "stream_not_registered", "dial_failed", reasonShuttingDown} {
		m.rejected.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.bytes, m.conns, m.rejected, m.dial)
	}
	return m
}

// counter returns a live byte counter for one stream and direction that
// also feeds the migration's own counter.
func (m *metrics) counter(k Kind, toTarget bool, own *Counters) func(int64) {
	dir := "from_target"
	slot := &own.FromTarget[k]
	if toTarget {
		dir = "to_target"
		slot = &own.ToTarget[k]
	}
	c := m.bytes.WithLabelValues(k.String(), dir)
	return func(n int64) {
		c.Add(float64(n))
		slot.Add(uint64(n))
	}
}
