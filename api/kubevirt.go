package api

// KubeVirtMigration is what KubeVirt will apply to a VMI's migration, and
// where each figure came from. On a KubeVirt node KubeVirt, not Ferry,
// drives migrations, so a plan there predicts with these figures rather
// than ferryd's own flags.
type KubeVirtMigration struct {
	AllowPostCopy     bool `json:"allowPostCopy"`
	AllowAutoConverge bool `json:"allowAutoConverge"`
	// AllowWorkloadDisruption decides what KubeVirt does when the
	// completion timeout passes: switch to post-copy (if allowed) or
	// force the switch-over, rather than cancel the migration.
	AllowWorkloadDisruption bool `json:"allowWorkloadDisruption"`
	// BandwidthBytesPerSecond is the cap KubeVirt hands libvirt, which
	// takes whole MiB/s; 0: unlimited.
	BandwidthBytesPerSecond uint64 `json:"bandwidthBytesPerSecond"`
	CompletionTimeoutPerGiB int64  `json:"completionTimeoutPerGiB"`
	ProgressTimeoutSeconds  int64  `json:"progressTimeoutSeconds"`
	MaxDowntimeMs           uint64 `json:"maxDowntimeMs"`
	// ParallelOutboundPerNode and ParallelPerCluster are the cluster's
	// current limits: KubeVirt applies them when it starts a migration,
	// whatever a VMI's status recorded.
	ParallelOutboundPerNode int `json:"parallelOutboundPerNode"`
	ParallelPerCluster      int `json:"parallelPerCluster"`
	// Policy is the MigrationPolicy that applies, if any.
	Policy string `json:"policy,omitempty"`
	// Source is one of the KubeVirtFrom constants.
	Source string `json:"source"`
}

// Sources of a KubeVirtMigration.
const (
	// KubeVirtFromVMIStatus: the VMI migrates now, and KubeVirt recorded
	// what it applies in status.migrationState.migrationConfiguration.
	KubeVirtFromVMIStatus = "vmi status"
	// KubeVirtFromPolicy: a MigrationPolicy over the cluster's
	// configuration (itself over KubeVirt's defaults).
	KubeVirtFromPolicy = "policy+cluster"
	// KubeVirtFromCluster: the KubeVirt CR's spec.configuration.migrations
	// over KubeVirt's defaults.
	KubeVirtFromCluster = "cluster"
	// KubeVirtFromDefaults: nothing configured; KubeVirt's built-in
	// defaults.
	KubeVirtFromDefaults = "kubevirt defaults"
)

// DrainBlock says why a VMI would hold up a node drain: KubeVirt refuses
// the eviction of its pod, and a drain retries that until it gives up.
type DrainBlock struct {
	// EvictionStrategy is the VMI's, or the cluster's when the VMI has
	// none.
	EvictionStrategy string `json:"evictionStrategy"`
	// Reason is KubeVirt's own, from the VMI's LiveMigratable condition
	// (DisksNotLiveMigratable, HostDeviceNotLiveMigratable...), or one of
	// the DrainBlock constants.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Reasons of a DrainBlock that are not KubeVirt's.
const (
	// DrainBlockExternal: with eviction strategy External, KubeVirt never
	// lets the pod be evicted; it marks the VMI for evacuation and leaves
	// it to another controller (cluster-api-provider-kubevirt) to remove.
	DrainBlockExternal = "ExternalEviction"
	// DrainBlockNotMigratable: strategy LiveMigrate, and the VMI has no
	// LiveMigratable condition that is True, nor a reason why not.
	DrainBlockNotMigratable = "NotLiveMigratable"
)
