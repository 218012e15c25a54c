package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/peer"
)

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
	// A peer whose certificate names no node, where one is required; one
	// that names a node badly; one that is not the node that prepared the
	// migration it names.
	reasonNoIdentity      = "no_node_identity"
	reasonInvalidIdentity = "invalid_node_identity"
	reasonWrongPeer       = "wrong_peer"
	// reasonDirectNotAllowed: a prepare asked for the direct path from a
	// peer this node does not take it from, or for what it does not
	// carry; reasonDirectUnavailable: this node cannot serve it (its
	// QEMU's certificates, its proxy's address).
	reasonDirectNotAllowed  = "direct_not_allowed"
	reasonDirectUnavailable = "direct_unavailable"
)

// rejectReasons are exported at zero from the start, so a rate over them
// has a series to work on before the first refusal. Refusals an Incoming
// returns with reasons of its own add theirs when they happen.
var rejectReasons = []string{"malformed_header", "unsupported_version", "header_timeout", "tls_handshake",
	peer.ReasonUnknownMigration, "expired_migration", "stream_not_registered", "dial_failed", peer.ReasonShuttingDown,
	reasonMalformedRequest, reasonTooLarge, reasonUnknownOp, reasonInvalidID, reasonInvalidDomain, reasonDuplicate,
	reasonWrongState, reasonTooManyStreams, reasonIncomingDisabled, reasonPrepareFailed, reasonNotStarted, reasonTooManyControls, reasonTooManyIncoming,
	reasonTooManyOpening, reasonTooManyReading, reasonTooManyFromPeer, reasonUnsettled, peer.ReasonRestarted, reasonNoIdentity, reasonInvalidIdentity, reasonWrongPeer,
	peer.ReasonGuestGone, "invalid_domain_xml", "flags_not_allowed", "domain_exists", "libvirt_unavailable", peer.ReasonInboundBusy, reasonDirectNotAllowed, reasonDirectUnavailable,
	peer.ReasonNoMemory, peer.ReasonDefinedHere}

// Metrics are the vectors the proxy counts into. Package metrics declares
// them (every series ferryd exports is named, described and labelled
// there) and builds them as a metrics.Proxy, a struct of these same
// fields; ferryd hands them over. A nil vector counts nothing.
type Metrics struct {
	// Bytes: labels stream, direction (to_target or from_target).
	Bytes *prometheus.CounterVec
	// Connections: labels stream, side (source or target).
	Connections *prometheus.GaugeVec
	// Rejected: label reason.
	Rejected *prometheus.CounterVec
	// DialDuration: label leg (peer or local).
	DialDuration *prometheus.HistogramVec
}

// zeroReasons exports every known refusal reason at zero.
func (m Metrics) zeroReasons() {
	if m.Rejected == nil {
		return
	}
	for _, r := range rejectReasons {
		m.Rejected.WithLabelValues(r)
	}
}

// reject counts one refusal.
func (m Metrics) reject(reason string) {
	if m.Rejected != nil {
		m.Rejected.WithLabelValues(reason).Inc()
	}
}

// dialed records how long setting up one leg of a relayed connection took.
func (m Metrics) dialed(leg string, start time.Time) {
	if m.DialDuration != nil {
		m.DialDuration.WithLabelValues(leg).Observe(time.Since(start).Seconds())
	}
}

// open counts an open relayed connection until the returned func is called.
func (m Metrics) open(k peer.Kind, side string) (closed func()) {
	if m.Connections == nil {
		return func() {}
	}
	g := m.Connections.WithLabelValues(k.String(), side)
	g.Inc()
	return g.Dec
}

// counter returns a live byte counter for one stream and direction that
// also feeds the migration's own counter.
func (m Metrics) counter(k peer.Kind, toTarget bool, own *Counters) func(int64) {
	dir := "from_target"
	slot := &own.FromTarget[k]
	if toTarget {
		dir = "to_target"
		slot = &own.ToTarget[k]
	}
	add := func(n int64) { slot.Add(uint64(n)) }
	if k == peer.KindMemory && toTarget {
		add = func(n int64) {
			slot.Add(uint64(n))
			own.wire.add(n, time.Now())
		}
	}
	if m.Bytes == nil {
		return add
	}
	c := m.Bytes.WithLabelValues(k.String(), dir)
	return func(n int64) {
		c.Add(float64(n))
		add(n)
	}
}
