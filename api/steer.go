package api

import "time"

// Recovery is a paused post-copy migration's resumption, as the job shows
// it.
type Recovery struct {
	// Until is when the pause outlasts --postcopy-recovery-timeout: from
	// then on it is overdue (FerryPostCopyRecoveryOverdue), and Ferry goes
	// on trying until it resumes or an operator gives up.
	Until time.Time `json:"until"`
	// Overdue says Until has passed with the migration still paused.
	Overdue   bool   `json:"overdue,omitempty"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError,omitempty"`
	// Resumed counts the attempts whose stream went back into post-copy.
	Resumed int `json:"resumed,omitempty"`
}

// PolicyStep is one decision of the convergence policy, kept on the job as
// evidence whether or not it was carried out.
type PolicyStep struct {
	Time          time.Time `json:"time"`
	Iteration     uint64    `json:"iteration"`
	Action        string    `json:"action"`
	Trigger       string    `json:"trigger,omitempty"`
	MaxDowntimeMs uint64    `json:"maxDowntimeMs,omitempty"`
	Reason        string    `json:"reason"`
	// Applied: the policy acted; false when it only advised.
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"`
}

// PolicyInfo is the policy's record on a job.
type PolicyInfo struct {
	Mode  string       `json:"mode"`
	Steps []PolicyStep `json:"steps,omitempty"`
}
