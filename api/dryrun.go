package api

// DryRunRequest asks (POST /v1/domains/{name}/check) whether a target
// would take the domain: the migration protocol up to the target's
// prepare, then cancelled, with no memory sent.
type DryRunRequest struct {
	// Socket, when set, is the libvirt socket serving the domain.
	Socket string `json:"socket,omitempty"`
	// Target is the target node's proxy address, HOST:PORT, and
	// TargetNode the node its certificate must name, as for a migration.
	Target     string `json:"target"`
	TargetNode string `json:"targetNode,omitempty"`
	// PostCopy asks with post-copy allowed, as the migration would be.
	PostCopy bool `json:"postCopy,omitempty"`
	// DataPath asks for the data path the migration would take: proxy
	// (the default) or direct, where the target's QEMU is prepared to
	// listen under its own TLS.
	DataPath string `json:"dataPath,omitempty"`
}

// DryRun is what a dry run found.
type DryRun struct {
	Target     string `json:"target"`
	TargetNode string `json:"targetNode,omitempty"`
	// DataPath is the data path asked for: proxy or direct.
	DataPath string `json:"dataPath"`
	// OK: the target's libvirt started the guest ready to receive it, and
	// stopped it again.
	OK bool `json:"ok"`
	// Step is where it stopped when not OK: begin (this node's libvirt),
	// cpu (the target's hypervisor does not offer the guest's CPU) or
	// prepare (the target, its Ferry or its libvirt).
	Step string `json:"step,omitempty"`
	// Error is the refusal in the words of whoever refused.
	Error string `json:"error,omitempty"`
	// CPU is how the guest's CPU compares with what the target's
	// hypervisor offers: identical, superset, default (the domain names
	// no CPU model), "host (needs an identical CPU)" (host-passthrough or
	// maximum: nothing to compare) or "not compared".
	CPU        string `json:"cpu,omitempty"`
	DurationMs int64  `json:"durationMs"`
}

// Dry-run steps.
const (
	DryRunBegin   = "begin"
	DryRunCPU     = "cpu"
	DryRunPrepare = "prepare"
)

// CheckResponse is GET /v1/domains/{name}/check (what the live domain
// holds that keeps it here), and POST with a DryRunRequest (that, and what
// the target said).
type CheckResponse struct {
	Node   string `json:"node"`
	Domain string `json:"domain"`
	// Migratable: nothing blocks it, and the dry run, if asked, passed.
	Migratable bool      `json:"migratable"`
	Blockers   []Blocker `json:"blockers"`
	DryRun     *DryRun   `json:"dryRun,omitempty"`
}
