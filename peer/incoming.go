package peer

import (
	"context"
	"errors"
	"time"
)

// Incoming runs the target's side of libvirt's migration protocol on this
// node's own libvirt. The proxy calls it for the control requests of a
// peer; it is the only way a peer reaches libvirt here. Every method is
// required: drive.Target asserts it implements Incoming, so a method
// renamed on either side fails to compile rather than silently switching a
// rule off (Held is what keeps a guest running here in post-copy).
type Incoming interface {
	// Check validates a prepare's request before anything is registered
	// for it; Prepare checks again. nil, nil: nothing to hand on.
	Check(m IncomingMigration, domainXML string) (*CheckedXML, error)
	// CompareCPU compares a guest's CPU with what this node's hypervisor
	// offers; a dry run asks it before libvirt's Prepare.
	CompareCPU(ctx context.Context, m IncomingMigration, domainXML string) (string, error)
	// Prepare validates what the peer sent and runs libvirt's Prepare,
	// which starts the target QEMU listening at m.MemoryURI (and
	// m.DiskURI); it returns libvirt's cookie for the source's Perform.
	// A *Refusal error is counted under its own reason.
	Prepare(ctx context.Context, m IncomingMigration, domainXML string, cookie []byte) ([]byte, error)
	// PrepareDirect is Prepare for a direct migration, with the URI
	// libvirt chose for the target QEMU (tcp://IP:PORT).
	PrepareDirect(ctx context.Context, m IncomingMigration, domainXML string, cookie []byte) (cookieOut []byte, uri string, err error)
	// Finish runs libvirt's Finish with the source's Perform cookie and
	// returns libvirt's cookie for the source's Confirm. In post-copy it
	// returns only when the migration has ended.
	Finish(ctx context.Context, m IncomingMigration, cookie []byte, cancelled bool) ([]byte, error)
	// Cancel tells libvirt a prepared migration will not happen, so it
	// kills the target QEMU.
	Cancel(ctx context.Context, m IncomingMigration) error
	// QEMU is the process ID, in ferryd's PID namespace, of the QEMU
	// libvirt runs for domain here, as libvirt's own pid file has it: the
	// one process the proxy hands that domain's streams to.
	QEMU(domain string) (int, error)
	// Instance names the guest a Prepare just started; Outcome answers
	// for that instance only, and another domain of the same name is not
	// it: OutcomeRunning, OutcomeStopped or OutcomeSplit, or an error
	// while that is not settled (libvirt's job on it still runs, or
	// libvirt cannot be asked).
	Instance(ctx context.Context, m IncomingMigration) (string, error)
	Outcome(ctx context.Context, m IncomingMigration) (string, error)
	// Persisted says whether a migrated guest is defined persistently on
	// this node now.
	Persisted(ctx context.Context, m IncomingMigration) bool
	// Held says a migration must not be dropped now, and why: its guest
	// runs here in post-copy, pulling pages through the migration's
	// streams.
	Held(ctx context.Context, m IncomingMigration) (string, bool)
	// ResumesPostCopy says whether this node's libvirt resumes a broken
	// post-copy by its own protocol; a post-copy prepared here whose source
	// does so too gives its target QEMU no monitor of Ferry's.
	ResumesPostCopy(ctx context.Context) bool
	// Recover has the target QEMU of m, paused in post-copy, listen at
	// socket for the source's resumed stream: through Ferry's own monitor
	// where the Prepare gave it one, by libvirt's own resume protocol
	// otherwise (r carries the source's Begin; without it the answer is
	// ErrResumeByLibvirt). It returns QEMU's migration state (on
	// QEMUCompleted nothing was armed) and libvirt's cookie for the
	// source's Perform, on libvirt's route.
	Recover(ctx context.Context, m IncomingMigration, socket string, r Resume) (string, []byte, error)
	// Resumed runs libvirt's Finish of a post-copy resumed by its own
	// protocol, with the source's Perform cookie; it returns once the
	// migration has completed here (with libvirt's cookie for the source's
	// Confirm) or failed again.
	Resumed(ctx context.Context, m IncomingMigration, cookie []byte, cancelled bool) ([]byte, error)
	// Recovered says whether the guest of m now runs whole here
	// (OutcomeRunning, with whether it was defined persistently), is still
	// split, or an error while libvirt's job still runs.
	Recovered(ctx context.Context, m IncomingMigration) (string, bool, error)
}

// Resume is a source's Begin of libvirt's resume protocol, sent with a
// recovery: its cookie for the target's Prepare.
type Resume struct {
	ByLibvirt bool
	Cookie    []byte
}

// CheckedXML is what a check made of a peer's XML: the domain to give
// libvirt and the definition to keep, re-marshalled from what was
// checked. The proxy hands it to the same migration's Prepare, so that
// the work is done once, in the peer's turn.
type CheckedXML struct {
	Live, Config string
}

// IncomingMigration is one migration the target prepares, as Incoming
// sees it. The URIs are chosen here, in this node's socket dir, never by
// the peer.
type IncomingMigration struct {
	ID     string
	Domain string
	// Config is the source's persistent definition of the guest, checked
	// like the live XML; empty for a transient guest, or from a source
	// that sends none.
	Config    string
	Flags     uint32
	Parallel  int
	PostCopy  bool
	MemoryURI string
	DiskURI   string // empty unless the source asked for a disk stream
	// MonitorPath, for a post-copy migration its source will resume, is
	// where Ferry's own monitor of the target QEMU is, if its Prepare gave
	// it one (see proxy.TargetMonitorPath), and RecoverFor how long the
	// source resumes it.
	MonitorPath string
	RecoverFor  time.Duration
	// LibvirtResume: the source and this node's libvirt resume a broken
	// post-copy by libvirt's own protocol, and the target QEMU gets no
	// monitor of Ferry's (MonitorPath is where it would be).
	LibvirtResume bool
	// PeerNode is the node the source's certificate names; empty when it
	// names none or without TLS.
	PeerNode string
	// Instance names the guest instance Prepare started (see
	// Incoming.Instance), so that an outcome is never read from another
	// domain given the same name since.
	Instance string
	// DryRun: libvirt's Prepare only, stopped at once.
	DryRun bool
	// Direct: QEMU's stream comes straight from the source's QEMU, under
	// QEMU's own TLS, to MemoryURI (tcp://IP, the port libvirt's), the
	// target QEMU listening on ListenAddress only. No stream of it
	// crosses this proxy.
	Direct        bool
	ListenAddress string
	// Checked is the check of the request's XML, handed to Prepare (and
	// a dry run's CPU comparison) only; nil where none ran.
	Checked *CheckedXML
}

// Refusal is an Incoming's "no" to a request, with the reason it is
// counted under in ferry_proxy_rejected_total.
type Refusal struct {
	Reason string
	Msg    string
}

func (r *Refusal) Error() string { return r.Msg }

// ErrResumeByLibvirt: an Incoming's word that the guest's post-copy is
// resumed by libvirt's own protocol here, which the request did not begin.
var ErrResumeByLibvirt = errors.New("this post-copy is resumed by libvirt's own protocol here: the source's Begin must come with the recovery")

// ErrGuestGone: an Incoming's word that the migration's guest is
// no longer here, so that no attempt can ever resume it.
var ErrGuestGone = errors.New("the migration's guest is no longer on this node")

// QEMUCompleted is QEMU's word for a migration that has moved every page
// (query-migrate's "completed").
const QEMUCompleted = "completed"

// Refusal codes the asking side acts on.
const (
	// ReasonRestarted: the target's ferryd restarted since it prepared
	// the migration it is asked about.
	ReasonRestarted = "restarted_since_prepare"
	// ReasonGuestGone: the post-copy a recovery names no longer has its
	// guest here (the node rebooted, the copy destroyed): it can never be
	// resumed.
	ReasonGuestGone = "guest_gone"
	// ReasonUnknownMigration: the migration a stream or a finish names was
	// never prepared on this node, or by another peer.
	ReasonUnknownMigration = "unknown_migration"
	// ReasonCPUIncompatible: a dry run found the guest's CPU is not one
	// this node's hypervisor offers. Only a dry run's answer carries it, and
	// it is never counted as a refusal.
	ReasonCPUIncompatible = "cpu_incompatible"
	// ReasonInboundBusy: this node takes as many incoming migrations as
	// its inbound slots allow; the source waits its turn and asks again.
	ReasonInboundBusy = "inbound_slots_busy"
	// ReasonNoMemory: the guest does not fit the memory this node has
	// available beside the guests already coming here.
	ReasonNoMemory = "insufficient_memory"
	// ReasonDefinedHere: this node holds the guest defined and shut off,
	// and does not adopt such definitions.
	ReasonDefinedHere = "domain_defined_here"
	// ReasonResumeByLibvirt: the post-copy a recovery names is resumed by
	// libvirt's own protocol here (its QEMU has no monitor of Ferry's):
	// the source asks again with its Begin (LibvirtResume).
	ReasonResumeByLibvirt = "resume_by_libvirt"
)
