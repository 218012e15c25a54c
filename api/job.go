package api

import "time"

// Role is the side of the migration this node plays.
type Role string

const (
	RoleSource Role = "source"
	RoleTarget Role = "target"
)

// Phase is where the job is in its life.
type Phase string

const (
	PhaseRunning   Phase = "Running"
	PhaseCompleted Phase = "Completed"
	PhaseFailed    Phase = "Failed"
	PhaseAborted   Phase = "Aborted"
	// PhasePostCopyFailed means the guest's memory is split across two hosts:
	// neither side can run it on its own.
	PhasePostCopyFailed Phase = "PostCopyFailed"
	// PhaseLost means this node lost sight of the job before libvirt said
	// how it ended (its libvirt socket went away, or the domain vanished
	// without a lifecycle event): the outcome is libvirt's, unknown here.
	PhaseLost Phase = "Lost"
	// PhaseInDoubt means Ferry drove the migration to its end and the
	// target has not said whether the guest runs there: the guest stays
	// paused on the source, whole, while Ferry keeps asking. Not terminal.
	PhaseInDoubt Phase = "InDoubt"
	// PhasePostCopyPaused means a post-copy migration Ferry drives broke and
	// QEMU holds it paused on both nodes while Ferry resumes it over fresh
	// streams; it becomes PostCopyFailed only when the recovery gives up.
	// Not terminal.
	PhasePostCopyPaused Phase = "PostCopyPaused"
)

// Finished reports whether the phase is terminal.
func (p Phase) Finished() bool {
	return p != PhaseRunning && p != PhaseInDoubt && p != PhasePostCopyPaused
}

// Mode is how memory is being moved, named as KubeVirt names it.
type Mode string

const (
	ModePreCopy  Mode = "PreCopy"
	ModePostCopy Mode = "PostCopy"
	ModePaused   Mode = "Paused"
)

// Verdict says whether pre-copy is getting anywhere.
type Verdict string

const (
	VerdictUnknown    Verdict = "Unknown"
	VerdictConverging Verdict = "Converging"
	VerdictStalled    Verdict = "Stalled"
	VerdictDiverging  Verdict = "Diverging"
)

// AbortStatus is the state of an abort request.
type AbortStatus string

const (
	AbortAborting  AbortStatus = "Aborting"
	AbortSucceeded AbortStatus = "Succeeded"
	AbortFailed    AbortStatus = "Failed"
)

// Job is the public view of one migration job, as served on the debug
// socket and read by ferryctl. Field names are a stable contract.
type Job struct {
	// ID names this job on this node for as long as ferryd runs: a domain
	// migrated twice, or the same name on two libvirt sockets, are
	// different jobs.
	ID        string `json:"id"`
	Domain    string `json:"domain"`
	UUID      string `json:"uuid"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Node      string `json:"node"`
	Socket    string `json:"socket"`
	Role      Role   `json:"role"`
	Phase     Phase  `json:"phase"`
	Mode      Mode   `json:"mode"`
	// PeerNode is the other end of a migration Ferry drove, as its proxy
	// certificate names it: on the target the node that prepared it, on
	// the source the node that answered. Empty when the certificate names
	// no node.
	PeerNode string `json:"peerNode,omitempty"`
	// IncomingID is, on a target, the id this node's proxy gave the
	// Ferry-driven migration the job receives.
	IncomingID string `json:"incomingId,omitempty"`

	Iteration                  uint64 `json:"iteration"`
	DataTotalBytes             uint64 `json:"dataTotalBytes"`
	DataProcessedBytes         uint64 `json:"dataProcessedBytes"`
	DataRemainingBytes         uint64 `json:"dataRemainingBytes"`
	MemoryTotalBytes           uint64 `json:"memoryTotalBytes"`
	MemoryRemainingBytes       uint64 `json:"memoryRemainingBytes"`
	TransferRateBytesPerSecond uint64 `json:"transferRateBytesPerSecond"`
	DirtyRateBytesPerSecond    uint64 `json:"dirtyRateBytesPerSecond"`
	PostCopyRequests           uint64 `json:"postCopyRequests"`
	AutoConvergeThrottle       uint64 `json:"autoConvergeThrottlePercent,omitempty"`
	ExpectedDowntimeMs         uint64 `json:"expectedDowntimeMs,omitempty"`
	DowntimeMs                 uint64 `json:"downtimeMs,omitempty"`
	ElapsedMs                  uint64 `json:"elapsedMs"`
	// ProgressPercent is the share of the data sent and never goes down
	// (as VDSM reports it): a new pass over memory finds pages dirtied
	// again and the raw share drops, which reads as going backwards.
	ProgressPercent float64 `json:"progressPercent"`
	// PassBytes is the size of the current pass over guest memory (the
	// most memory left seen in it) and PassPercent how much of it is sent.
	PassBytes         uint64   `json:"passBytes,omitempty"`
	PassPercent       float64  `json:"passPercent,omitempty"`
	Convergence       Verdict  `json:"convergence"`
	ConvergenceReason string   `json:"convergenceReason,omitempty"`
	EtaSeconds        *float64 `json:"etaSeconds"`

	StartTime     time.Time  `json:"startTime"`
	EndTime       *time.Time `json:"endTime,omitempty"`
	UpdateTime    time.Time  `json:"updateTime"`
	FailureReason string     `json:"failureReason,omitempty"`
	// AbortStatus follows an abort requested through Ferry, as KubeVirt
	// names it: Aborting, then Succeeded or Failed.
	AbortStatus AbortStatus `json:"abortStatus,omitempty"`
	// FailurePlane and FailureClass say where and why a Failed, Aborted or
	// PostCopyFailed job broke; FailureEvidence the facts that decided it.
	FailurePlane    FailurePlane `json:"failurePlane,omitempty"`
	FailureClass    FailureClass `json:"failureClass,omitempty"`
	FailureEvidence []string     `json:"failureEvidence,omitempty"`
	// AbortedBy says who asked Ferry for the abort: operator, policy or
	// deadline.
	AbortedBy string `json:"abortedBy,omitempty"`
	// MaxDowntimeMs is libvirt's allowed downtime for the switch-over, as
	// last read or set.
	MaxDowntimeMs uint64 `json:"maxDowntimeMs,omitempty"`
	// Policy is what the convergence policy decided for this job.
	Policy *PolicyInfo `json:"policy,omitempty"`
	// DomainState is the domain's libvirt state/reason as last seen, e.g.
	// "paused/post-copy-failed".
	DomainState string `json:"domainState,omitempty"`
	// Recovery follows a broken post-copy Ferry resumes (PostCopyPaused).
	Recovery *Recovery `json:"recovery,omitempty"`

	QEMU *QEMUFigures `json:"qemu,omitempty"`
	// Proxy is set when Ferry drove the migration through its own proxy.
	Proxy *ProxyInfo `json:"proxy,omitempty"`
	// VMI is what the API server says of the domain's KubeVirt VMI.
	VMI *VMIInfo `json:"vmi,omitempty"`

	Samples    []Sample    `json:"samples,omitempty"`
	Iterations []Iteration `json:"iterations,omitempty"`
	Events     []Event     `json:"events,omitempty"`
}

// QEMUFigures are the QEMU process's cgroup CPU figures during the job: a
// CPU-starved source is a common reason pre-copy does not converge.
type QEMUFigures struct {
	PID             int     `json:"pid"`
	CgroupPath      string  `json:"cgroup,omitempty"`
	CPUUsageSeconds float64 `json:"cpuUsageSeconds"`
	CPUPercent      float64 `json:"cpuPercent"`
	// The throttled figures are those of the group (the domain's, or the
	// emulator group below it) throttled in the larger share of its CFS
	// periods during the job.
	ThrottledCgroup         string  `json:"throttledCgroup,omitempty"`
	ThrottledPeriods        uint64  `json:"throttledPeriods"`
	ThrottledSeconds        float64 `json:"throttledSeconds"`
	ThrottledPercentPeriods float64 `json:"throttledPercentOfPeriods"`
	Error                   string  `json:"error,omitempty"`
}

// ProxyInfo describes a migration Ferry drove through its proxy.
type ProxyInfo struct {
	MigrationID string `json:"migrationId"`
	Target      string `json:"target"`
	TLS         bool   `json:"tls"`
	Parallel    int    `json:"parallel,omitempty"`
	// TargetNode is the node the target's certificate names.
	TargetNode string `json:"targetNode,omitempty"`
	// Bytes is stream -> direction -> bytes relayed on this node.
	Bytes map[string]map[string]uint64 `json:"bytes,omitempty"`
	// WireBytesPerSecond is the rate at which the source proxy sent
	// memory to the target, as the path sustained it: the median of its
	// whole 2 s windows after the first.
	WireBytesPerSecond uint64 `json:"wireBytesPerSecond,omitempty"`
	// SwitchoverBandwidthMiBs is what QEMU was told its switch-over may
	// count on (the migration's cap), and SwitchoverFrom why: the path
	// was seen to sustain it.
	SwitchoverBandwidthMiBs uint64 `json:"switchoverBandwidthMiBs,omitempty"`
	SwitchoverFrom          string `json:"switchoverFrom,omitempty"`
	// CapMiBs is the migration's own bandwidth cap at its start, MiB/s (0:
	// none).
	CapMiBs int `json:"capMiBs,omitempty"`
	// Compression is what QEMU did to pages ("zstd", or empty for none),
	// and DataChoice why, when the request left it to Ferry ("auto").
	Compression string `json:"compression,omitempty"`
	DataChoice  string `json:"dataChoice,omitempty"`
	// DataPath is "direct" when QEMU's stream went straight to the
	// target's QEMU, under QEMU's own TLS (the proxy carried only the
	// protocol's steps), at DirectURI; empty through the proxy.
	DataPath  string   `json:"dataPath,omitempty"`
	DirectURI string   `json:"directUri,omitempty"`
	Errors    []string `json:"errors,omitempty"`
	// TargetLost says why, once its streams broke, the source holds the
	// target's proxy to have lost the migration: the finish found nothing
	// listening (its ferryd is down), or a proxy there that never heard of
	// it (its ferryd restarted).
	TargetLost string `json:"targetLost,omitempty"`
	// Ended says the driver has ended the migration: Bytes, the rates and
	// Errors are final. libvirt's job may end a moment before, and the
	// job shows its phase from then.
	Ended bool `json:"ended,omitempty"`
}

// VMIInfo is a KubeVirt VirtualMachineInstance as it bears on a migration.
type VMIInfo struct {
	Namespace          string             `json:"namespace"`
	Name               string             `json:"name"`
	UID                string             `json:"uid"`
	Phase              string             `json:"phase,omitempty"`
	NodeName           string             `json:"nodeName,omitempty"`
	EvacuationNodeName string             `json:"evacuationNodeName,omitempty"`
	EvictionRequested  bool               `json:"evictionRequested,omitempty"`
	Irrecoverable      bool               `json:"irrecoverable,omitempty"`
	MigrationState     *VMIMigrationState `json:"migrationState,omitempty"`
	ActivePods         map[string]string  `json:"activePods,omitempty"`
}

// VMIMigrationState is the part of status.migrationState Ferry shows.
type VMIMigrationState struct {
	SourceNode     string `json:"sourceNode,omitempty"`
	TargetNode     string `json:"targetNode,omitempty"`
	SourcePod      string `json:"sourcePod,omitempty"`
	TargetPod      string `json:"targetPod,omitempty"`
	MigrationUID   string `json:"migrationUid,omitempty"`
	Mode           string `json:"mode,omitempty"`
	AbortRequested bool   `json:"abortRequested,omitempty"`
	AbortStatus    string `json:"abortStatus,omitempty"`
	Completed      bool   `json:"completed,omitempty"`
	Failed         bool   `json:"failed,omitempty"`
	FailureReason  string `json:"failureReason,omitempty"`
}

// Sample is one reading of the job's statistics.
type Sample struct {
	Time                       time.Time `json:"time"`
	ElapsedMs                  uint64    `json:"elapsedMs"`
	Iteration                  uint64    `json:"iteration"`
	DataProcessedBytes         uint64    `json:"dataProcessedBytes"`
	DataRemainingBytes         uint64    `json:"dataRemainingBytes"`
	MemoryRemainingBytes       uint64    `json:"memoryRemainingBytes"`
	TransferRateBytesPerSecond uint64    `json:"transferRateBytesPerSecond"`
	DirtyRateBytesPerSecond    uint64    `json:"dirtyRateBytesPerSecond"`
	PostCopyRequests           uint64    `json:"postCopyRequests"`
	QEMUCPUPercent             float64   `json:"qemuCpuPercent,omitempty"`
}

// Iteration is one pass over guest memory. Remaining at its start is what
// the previous pass left dirty: the series of those values is what the
// convergence verdict is read from.
type Iteration struct {
	Number                     uint64     `json:"number"`
	Start                      time.Time  `json:"start"`
	End                        *time.Time `json:"end,omitempty"`
	MemoryRemainingBytes       uint64     `json:"memoryRemainingBytes"`
	DirtyRateBytesPerSecond    uint64     `json:"dirtyRateBytesPerSecond"`
	TransferRateBytesPerSecond uint64     `json:"transferRateBytesPerSecond"`
}

// Event is one thing that happened to the job, kept as evidence.
type Event struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
}

// Domain is one domain on this node as the tracker last saw it.
type Domain struct {
	Name      string `json:"name"`
	UUID      string `json:"uuid"`
	Namespace string `json:"namespace,omitempty"`
	VMI       string `json:"vmi,omitempty"`
	Socket    string `json:"socket"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	JobPhase  Phase  `json:"jobPhase,omitempty"`
	JobRole   Role   `json:"jobRole,omitempty"`
	// HoldsGuest: this copy runs the guest, or could run it again on its
	// own; the side of a migration that waits for the other does not (see
	// migration.HoldsGuest). One UUID held on two nodes is two guests.
	HoldsGuest bool `json:"holdsGuest"`
	// AttentionReason is a short, stable code of that condition
	// (postcopy_failed, paused_after_migration), for alert rules.
	AttentionReason string `json:"attentionReason,omitempty"`
	// Attention names a condition an operator must act on, such as a guest
	// left paused by a failed migration.
	Attention string `json:"attention,omitempty"`
	// DirtyRates are the last measurements of the guest's dirty rate,
	// oldest first, taken while it did not migrate, and
	// DirtyBytesPerSecond the rate they give (see measure.Estimate).
	DirtyRates          []DirtyRate `json:"dirtyRates,omitempty"`
	DirtyBytesPerSecond uint64      `json:"dirtyBytesPerSecond,omitempty"`
	// MemoryBytes is the guest's memory, the most a migration has to
	// send, and ResidentBytes how much of it the guest has touched (the
	// resident part of QEMU's mapping of it; untouched pages go as zero
	// pages); both as last measured.
	MemoryBytes   uint64 `json:"memoryBytes,omitempty"`
	ResidentBytes uint64 `json:"residentBytes,omitempty"`
	// Migratable is what `ferryctl check` without a target says of a
	// running domain: nothing in its live XML blocks a migration, and
	// BlockedBy the code of the first thing that does. Unset when the
	// check could not be made (see CheckError).
	Migratable *bool  `json:"migratable,omitempty"`
	BlockedBy  string `json:"blockedBy,omitempty"`
	CheckError string `json:"checkError,omitempty"`
}

// DirtyRate is one measurement of how fast a guest dirties its memory,
// taken by QEMU without migrating it.
type DirtyRate struct {
	Time           time.Time `json:"time"`
	BytesPerSecond uint64    `json:"bytesPerSecond"`
	// Mode is QEMU's way of measuring: page-sampling, dirty-bitmap or
	// dirty-ring.
	Mode          string `json:"mode"`
	PeriodSeconds int    `json:"periodSeconds"`
}
