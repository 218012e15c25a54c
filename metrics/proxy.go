package metrics

import "github.com/prometheus/client_golang/prometheus"

var (
	defProxyBytes = define(Def{Name: "ferry_proxy_bytes_total", Type: Counter, Area: AreaProxy,
		Help:   "Bytes relayed by the migration proxy, by stream and direction (to_target or from_target).",
		Labels: []string{"stream", "direction"}})
	defProxyConnections = define(Def{Name: "ferry_proxy_connections", Type: Gauge, Area: AreaProxy,
		Help:   "Open relayed connections, by stream and by this node's side of the migration.",
		Labels: []string{"stream", "side"}})
	defProxyRejected = define(Def{Name: "ferry_proxy_rejected_total", Type: Counter, Area: AreaProxy,
		Help:   "Connections and migrations the proxy refused, by reason.",
		Labels: []string{"reason"}})
	defProxyDial = define(Def{Name: "ferry_proxy_dial_duration_seconds", Type: Histogram, Area: AreaProxy,
		Help:    "Time to set up a relayed connection: to the peer proxy (TCP, TLS, header, answer) or to the local socket.",
		Labels:  []string{"leg"},
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}})
)

// Proxy are the migration proxy's vectors. Package proxy keeps their
// state and counts into them but declares none of them: ferryd builds
// them here and hands them over as a proxy.Metrics, a struct of the same
// fields (so proxy depends on neither this package nor the tracker).
type Proxy struct {
	// Bytes: labels stream, direction.
	Bytes *prometheus.CounterVec
	// Connections: labels stream, side.
	Connections *prometheus.GaugeVec
	// Rejected: label reason.
	Rejected *prometheus.CounterVec
	// DialDuration: label leg.
	DialDuration *prometheus.HistogramVec
}

// NewProxy builds the proxy's vectors and registers them with reg unless
// reg is nil.
func NewProxy(reg prometheus.Registerer) Proxy {
	m := Proxy{
		Bytes:        defProxyBytes.counterVec(),
		Connections:  defProxyConnections.gaugeVec(),
		Rejected:     defProxyRejected.counterVec(),
		DialDuration: defProxyDial.histogramVec(),
	}
	if reg != nil {
		reg.MustRegister(m.Bytes, m.Connections, m.Rejected, m.DialDuration)
	}
	return m
}
