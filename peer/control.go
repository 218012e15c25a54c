package peer

import (
	"errors"
	"fmt"
)

// The only requests one ferryd may make of another: run the target's side
// of one incoming migration of a named domain.
const (
	OpPrepare = "prepare" // validate the domain XML, register the streams, libvirt's Prepare
	OpFinish  = "finish"  // libvirt's Finish, then end the migration
	OpCancel  = "cancel"  // drop a prepared migration the source will not perform
)

// A post-copy migration whose streams broke is paused by QEMU on both
// nodes (OutcomeSplit), and can go on over fresh streams: the source asks
// for one with OpRecover, each attempt anew, and once QEMU has completed
// asks with OpRecovered what became of the guest.
const (
	OpRecover   = "recover"   // have the paused target QEMU listen on a fresh stream
	OpRecovered = "recovered" // say whether the guest runs whole here after a recovery
	// OpResumed runs libvirt's Finish of a post-copy resumed by libvirt's
	// own protocol (see ReasonResumeByLibvirt): it answers once the
	// migration has completed here, or broke again.
	OpResumed = "resumed"
)

// Bounds of what a peer may send: the whole request is read through a
// limit, and the domain XML, the bulk of it, has its own cap.
const (
	MaxControlRequest = 4 << 20
	MaxDomainXML      = 2 << 20
	MaxCookie         = 256 << 10
	MaxParallel       = 64
)

// ControlRequest is what one ferryd asks of another over the proxy port.
type ControlRequest struct {
	Op string `json:"op"`
	// Migration is, for finish and cancel, the id the target's prepare
	// answered; for prepare, only the source's own label, for the logs.
	Migration string `json:"migration"`
	Domain    string `json:"domain"`
	// Prepare: libvirt's domain XML and cookie from the source's Begin,
	// the migration flags, the multifd connection count, whether post-copy
	// may be used and whether a disk stream comes too; DeadlineSeconds is
	// how long the source gives the whole migration (the target caps it).
	XML string `json:"xml,omitempty"`
	// Config, on a persistent guest's prepare, is its persistent
	// definition (libvirt's inactive XML): what the target keeps once the
	// guest is handed over, pending config changes included and live-only
	// ones not. XML and Config share MaxDomainXML.
	Config          string  `json:"config,omitempty"`
	Cookie          []byte  `json:"cookie,omitempty"`
	Flags           uint32  `json:"flags,omitempty"`
	Parallel        int     `json:"parallel,omitempty"`
	PostCopy        bool    `json:"postCopy,omitempty"`
	Disk            bool    `json:"disk,omitempty"`
	DeadlineSeconds float64 `json:"deadlineSeconds,omitempty"`
	// RecoverSeconds, for a post-copy prepare, is how long the source
	// resumes it should its streams break; 0: never, and the target QEMU
	// gets no monitor of Ferry's.
	RecoverSeconds float64 `json:"recoverSeconds,omitempty"`
	// LibvirtResume, on a post-copy prepare, says the source resumes a
	// broken post-copy by libvirt's own protocol (VIR_MIGRATE_POSTCOPY_RESUME)
	// where the target's libvirt can: the target QEMU then gets no monitor
	// of Ferry's. On a recover, it says the request carries the source's
	// Begin of that protocol (its Cookie). A ferryd from before it refuses
	// a request with it (malformed_request), and is asked again without.
	LibvirtResume bool `json:"libvirtResume,omitempty"`
	// Finish and resumed: the Perform cookie rides in Cookie; Cancelled
	// says Perform failed.
	Cancelled bool `json:"cancelled,omitempty"`
	// DryRun, on a prepare, asks whether this node would take the
	// migration: its libvirt prepares it and the target stops the guest at
	// once, before answering; no stream is ever opened.
	DryRun bool `json:"dryRun,omitempty"`
	// Direct, on a prepare, asks for the direct path: the target QEMU
	// listens on the address the source reached this proxy at, under
	// QEMU's own TLS, and the answer's URI says where.
	Direct bool `json:"direct,omitempty"`
}

// ControlResponse answers a ControlRequest. A refusal has a Reason (the
// ferry_proxy_rejected_total label); a libvirt step that failed has only
// an Error.
type ControlResponse struct {
	// Migration is the id the target chose at prepare. Knowing it is what
	// lets a peer open the migration's streams, so it is only ever sent to
	// the peer that prepared it.
	Migration string                       `json:"migration,omitempty"`
	Error     string                       `json:"error,omitempty"`
	Reason    string                       `json:"reason,omitempty"`
	Cookie    []byte                       `json:"cookie,omitempty"`
	Counters  map[string]map[string]uint64 `json:"counters,omitempty"`
	// Outcome, in a finish's answer, says whether the guest runs on the
	// target now (OutcomeRunning, OutcomeStopped, OutcomeSplit); empty
	// when the target could not tell, which settles nothing.
	Outcome string `json:"outcome,omitempty"`
	// Persisted, in a finish's answer, says the guest is defined
	// persistently on the target, as libvirt there has it (its Finish
	// saved the checked definition before starting the guest), so the
	// source may drop its own: a persistent guest keeps exactly one.
	Persisted bool `json:"persisted,omitempty"`
	// CPU, in a dry run's answer, is how the guest's CPU compares with
	// what the target's hypervisor offers (identical, superset, or
	// "default" when the domain names no CPU model).
	CPU string `json:"cpu,omitempty"`
	// URI, in a direct prepare's answer, is where the target QEMU listens
	// (tcp://IP:PORT): the source's QEMU connects there itself.
	URI string `json:"uri,omitempty"`
	// PeerNode is, on the side that asked, the node the answering
	// proxy's certificate names; never sent.
	PeerNode string `json:"-"`
	// Owner is what binds the rest of the migration to the proxy that
	// answered: the proxy's ControlTo and a source migration's BindTarget
	// take it; never sent.
	Owner string `json:"-"`
}

// ControlError is a target's negative answer.
type ControlError struct {
	Target string
	Reason string // empty when a libvirt step failed rather than a refusal
	Msg    string
}

func (e *ControlError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("target %s refused (%s): %s", e.Target, e.Reason, e.Msg)
	}
	return fmt.Sprintf("target %s: %s", e.Target, e.Msg)
}

// Is lets a shutdown refusal match ErrShuttingDown on the source too.
func (e *ControlError) Is(target error) bool {
	return target == ErrShuttingDown && e.Reason == ReasonShuttingDown
}

// ErrShuttingDown matches the refusals of a proxy that is shutting down.
var ErrShuttingDown = errors.New("proxy is shutting down")

// ReasonShuttingDown is the ferry_proxy_rejected_total reason of migrations
// refused because ferryd is shutting down.
const ReasonShuttingDown = "shutting_down"
