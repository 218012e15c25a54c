package api

import "time"

// Prediction is how a migration of a domain is expected to go, before it
// starts, with the figures it was made from.
type Prediction struct {
	// Strategy is pre-copy (it converges), post-copy (pre-copy would not
	// converge; post-copy after the first pass ends it) or cannot-move
	// (it would not converge, and post-copy is not allowed).
	Strategy  string `json:"strategy"`
	Converges bool   `json:"converges"`
	// Passes over memory pre-copy takes, the first full one and the
	// stop-and-copy included.
	Passes     int     `json:"passes"`
	Seconds    float64 `json:"seconds"`
	DowntimeMs float64 `json:"downtimeMs"`
	Reason     string  `json:"reason"`

	MemoryBytes             uint64  `json:"memoryBytes"`
	FirstPassBytes          uint64  `json:"firstPassBytes"`
	DirtyBytesPerSecond     uint64  `json:"dirtyBytesPerSecond"`
	BandwidthBytesPerSecond uint64  `json:"bandwidthBytesPerSecond"`
	MaxDowntimeMs           uint64  `json:"maxDowntimeMs"`
	SetupSeconds            float64 `json:"setupSeconds"`
}

// Movers of a PlanEntry.
const (
	MoverFerry    = "ferry"
	MoverKubeVirt = "kubevirt"
)

// Strategies of a Prediction.
const (
	StrategyPreCopy    = "pre-copy"
	StrategyPostCopy   = "post-copy"
	StrategyCannotMove = "cannot-move"
)

// PlanRequest asks for a plan of this node's evacuation (GET /v1/plan,
// its fields as query parameters; POST /v1/evacuations runs it).
type PlanRequest struct {
	// Targets are the nodes to move to, by name (ferryd --peer gives
	// their proxy addresses); domains go to them in turn.
	Targets []string `json:"targets"`
	// Parallel is how many migrations run at once; 0: the node's
	// outbound slots.
	Parallel int `json:"parallel,omitempty"`
	// BandwidthMiBs is the link's bandwidth; 0: ferryd's
	// --migration-bandwidth-mibs, else learned from the last migrations
	// to each target.
	BandwidthMiBs int `json:"bandwidthMiBs,omitempty"`
	// DryRun, for an evacuation: check every domain against its target
	// (a dry run each) and move nothing.
	DryRun bool `json:"dryRun,omitempty"`
}

// PlanEntry is one domain in a plan, and once an evacuation ran it, what
// became of it.
type PlanEntry struct {
	Order      int         `json:"order"`
	Domain     string      `json:"domain"`
	Socket     string      `json:"socket"`
	Target     string      `json:"target,omitempty"`
	Migratable bool        `json:"migratable"`
	Blockers   []Blocker   `json:"blockers,omitempty"`
	Prediction *Prediction `json:"prediction,omitempty"`
	// Mover is who would migrate it: ferry (a domain of this node's own
	// libvirt) or kubevirt (a VMI's, in its launcher pod).
	Mover string `json:"mover"`
	// StartSeconds and EndSeconds are when the plan has it start and end,
	// from the evacuation's start.
	StartSeconds float64 `json:"startSeconds"`
	EndSeconds   float64 `json:"endSeconds"`

	// KubeVirt, for a VMI's domain, is what KubeVirt will apply to its
	// migration: the prediction is made with it, and the entry is advice
	// (KubeVirt, not Ferry, moves it). DrainBlock says why KubeVirt would
	// refuse to evict it, holding up a drain.
	KubeVirt   *KubeVirtMigration `json:"kubevirt,omitempty"`
	DrainBlock *DrainBlock        `json:"drainBlock,omitempty"`

	// State, in an evacuation: planned, waiting, migrating, moved, failed
	// or skipped (it cannot move, or KubeVirt moves it).
	State       string  `json:"state,omitempty"`
	RealSeconds float64 `json:"realSeconds,omitempty"`
	Error       string  `json:"error,omitempty"`
	DryRun      *DryRun `json:"dryRun,omitempty"`
}

// Plan is how this node's domains would leave it, and how long that takes.
type Plan struct {
	Node     string   `json:"node"`
	Targets  []string `json:"targets"`
	Parallel int      `json:"parallel"`
	// BandwidthBytesPerSecond is the link's, and BandwidthFrom where that
	// figure comes from; SetupSeconds and SetupFrom the same for what a
	// migration costs besides its memory.
	BandwidthBytesPerSecond uint64  `json:"bandwidthBytesPerSecond"`
	BandwidthFrom           string  `json:"bandwidthFrom"`
	SetupSeconds            float64 `json:"setupSeconds"`
	SetupFrom               string  `json:"setupFrom"`
	MaxDowntimeMs           uint64  `json:"maxDowntimeMs"`
	AllowPostCopy           bool    `json:"allowPostCopy"`

	Entries []PlanEntry `json:"entries"`
	// PredictedSeconds is the whole evacuation's; CannotMove counts the
	// domains that would stay, DrainBlocked the VMIs among them KubeVirt
	// would refuse to evict.
	PredictedSeconds float64 `json:"predictedSeconds"`
	CannotMove       int     `json:"cannotMove"`
	DrainBlocked     int     `json:"drainBlocked,omitempty"`
}

// Evacuation is an evacuation under way or done: its plan, each entry's
// state, and the real time against the plan's.
type Evacuation struct {
	Plan
	Running     bool      `json:"running"`
	Started     time.Time `json:"started"`
	RealSeconds float64   `json:"realSeconds,omitempty"`
	Moved       int       `json:"moved"`
	Failed      int       `json:"failed"`
}
