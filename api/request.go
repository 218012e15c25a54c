package api

// MigrateRequest asks ferryd (POST /v1/migrations) for a live migration
// Ferry drives itself: its ferryds run libvirt's migration protocol step by
// step, each on its own libvirt, and QEMU's streams cross its proxy.
type MigrateRequest struct {
	Domain string `json:"domain"`
	// Socket, when set, is the libvirt socket serving Domain: needed only
	// when more than one serves a domain of that name.
	Socket string `json:"socket,omitempty"`
	// Target is the target node's proxy address, HOST:PORT.
	Target string `json:"target"`
	// TargetNode, when set, is the node the migration must go to: the
	// proxy answering at Target must hold a certificate naming it (directly
	// or through its ferryd pod), or the prepare is never sent.
	TargetNode           string  `json:"targetNode,omitempty"`
	PostCopy             bool    `json:"postCopy,omitempty"`
	PostCopyAfterSeconds float64 `json:"postCopyAfterSeconds,omitempty"`
	AutoConverge         bool    `json:"autoConverge,omitempty"`
	BandwidthMiBs        int     `json:"bandwidthMiBs,omitempty"`
	// PostCopyBandwidthMiBs caps post-copy's background transfer (QEMU
	// ignores the pre-copy cap once in post-copy).
	PostCopyBandwidthMiBs int `json:"postCopyBandwidthMiBs,omitempty"`
	Parallel              int `json:"parallel,omitempty"`
	// Compression is what QEMU does to pages before sending them: "none"
	// (the default), "zstd" (over Parallel multifd channels, at least 1;
	// not with post-copy), or "auto", which chooses channels and
	// compression from the link's rate, the guest's dirty rate and the
	// source's idle CPUs, and says why on the job.
	Compression string `json:"compression,omitempty"`
	// DataPath is how QEMU's memory stream goes: "proxy" (the default),
	// through both nodes' Ferry proxies, or "direct", from QEMU straight
	// to the target's QEMU under QEMU's own TLS, with certificates from
	// the nodes' CA. Direct needs TargetNode, a node both nodes list in
	// --direct-peers, and no post-copy.
	DataPath string `json:"dataPath,omitempty"`
	// Policy overrides the node's convergence policy mode for this
	// migration (observe, advise or act), MaxDowntimeMs its downtime cap.
	Policy        string `json:"policy,omitempty"`
	MaxDowntimeMs uint64 `json:"maxDowntimeMs,omitempty"`
	// DeadlineSeconds, when set, shortens the migration's deadline (150 s
	// per GiB of guest memory, at least 5 min); it can only lower it. At
	// the deadline the migration switches to post-copy if it may, and is
	// aborted if not.
	DeadlineSeconds float64 `json:"deadlineSeconds,omitempty"`
}

// MigrateResponse answers a MigrateRequest.
type MigrateResponse struct {
	MigrationID string `json:"migrationId"`
	Domain      string `json:"domain"`
	Target      string `json:"target"`
	TLS         bool   `json:"tls"`
	// TargetNode is the node the target's proxy certificate names.
	TargetNode string `json:"targetNode,omitempty"`
	Message    string `json:"message"`
}

// AbortResult says what an abort request did.
type AbortResult struct {
	Job     Job    `json:"job"`
	Message string `json:"message"`
}

// QueueHeader, set to any value on a POST /v1/migrations over HTTP/1.1,
// asks to hear what the migration waits for before it starts; the answer
// then comes first as informational answers (102 Processing) carrying in
// QueueHeader the sentence saying what for: one of this node's outbound
// slots, or one of the target's inbound slots. The final answer follows
// as usual.
const QueueHeader = "Ferry-Queued"
