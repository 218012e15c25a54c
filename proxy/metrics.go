package proxy

import "github.com/prometheus/client_golang/prometheus"

// Reasons of ferry_proxy_rejected_total beyond the header and stream ones.
const (
	reasonMalformedRequest = "malformed_request"
	reasonTooLarge         = "request_too_large"
	reasonUnknownOp        = "unknown_op"
	reasonInvalidID        = "invalid_id"
	reasonInvalidDomain    = "invalid_domain"
	reasonDuplicate        = "duplicate_migration"
	reasonWrongState       = "wrong_state"
	reasonTooManyStreams   = "too_many_streams"
	reasonIncomingDisabled = "incoming_disabled"
	reasonPrepareFailed    = "prepare_failed"
	reasonNotStarted       = "not_started"
	reasonTooManyControls  = "too_many_control_connections"
	reasonTooManyIncoming  = "too_many_migrations"
	reasonTooManyOpening   = "too_many_opening_connections"
	reasonTooManyReading   = "too_many_requests_being_read"
	reasonTooManyFromPeer  = "too_many_control_connections_from_peer"
	reasonUnsettled        = "outcome_unsettled"
	// ReasonRestarted: the target's ferryd restarted since it prepared
	// the migration it is asked about.
	ReasonRestarted = "restarted_since_prepare"
	// A peer whose certificate names no node, where one is required; one
	// that names a node badly; one that is not the node that prepared the
	// migration it names.
	reasonNoIdentity      = "no_node_identity"
	reasonInvalidIdentity = "invalid_node_identity"
	reasonWrongPeer       = "wrong_peer"
	// ReasonUnknownMigration: the migration a stream or a finish names was
	// never prepared on this node, or by another peer.
	ReasonUnknownMigration = "unknown_migration"
)

// rejectReasons are exported at zero from the start, so a rate over them
// has a series to work on before the first refusal. Refusals an Incoming
// returns with reasons of its own add theirs when they happen.
var rejectReasons = []string{"malformed_header", "unsupported_version", "header_timeout", "tls_handshake",
	ReasonUnknownMigration, "expired_migration", "stream_not_registered", "dial_failed", reasonShuttingDown,
	reasonMalformedRequest, reasonTooLarge, reasonUnknownOp, reasonInvalidID, reasonInvalidDomain, reasonDuplicate,
	reasonWrongState, reasonTooManyStreams, reasonIncomingDisabled, reasonPrepareFailed, reasonNotStarted, reasonTooManyControls, reasonTooManyIncoming,
	reasonTooManyOpening, reasonTooManyReading, reasonTooManyFromPeer, reasonUnsettled, ReasonRestarted, reasonNoIdentity, reasonInvalidIdentity, reasonWrongPeer,
	"invalid_domain_xml", "flags_not_allowed", "domain_exists", "libvirt_unavailable"}

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
	for _, r := range rejectReasons {
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

// RejectedCounter is ferry_proxy_rejected_total for one reason, for tests
// outside this package.
func (p *Proxy) RejectedCounter(reason string) prometheus.Counter {
	return p.metrics.rejected.WithLabelValues(reason)
}
