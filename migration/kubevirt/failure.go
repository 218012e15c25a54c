package kubevirt

import "time"

// Failure is the value of FailureAnnotation: enough to tell, from the VMI
// alone, which node saw the post-copy failure, on which side, and how far
// the migration had got.
type Failure struct {
	Side     string    `json:"side"`
	Node     string    `json:"node"`
	Detected time.Time `json:"detected"`
	// MigrationUID is KubeVirt's, from the VMI's status.migrationState, so
	// the failure can be matched with its VirtualMachineInstanceMigration.
	MigrationUID string `json:"migrationUID,omitempty"`
	// Message is KubeVirt's own text, so tools that look for it find it.
	Message          string `json:"message"`
	Reason           string `json:"reason,omitempty"`
	RemainingBytes   uint64 `json:"remainingBytes"`
	PostCopyRequests uint64 `json:"postCopyRequests"`
}
