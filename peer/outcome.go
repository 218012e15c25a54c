package peer

// What a target says of its copy of the guest when it answers a finish.
// The source decides by it alone whether to resume its own copy: only
// OutcomeStopped lets it, since a guest must never run on both nodes.
const (
	// OutcomeRunning: the target's copy runs (or is held in post-copy);
	// the source must not resume its own.
	OutcomeRunning = "running"
	// OutcomeStopped: the target has no copy of the guest any more.
	OutcomeStopped = "stopped"
	// OutcomeSplit: post-copy failed, and the guest's memory is split
	// between the two copies: neither may be resumed or destroyed. The
	// source ends its side as libvirt's own client does after a failed
	// Finish, and libvirt keeps its copy paused.
	OutcomeSplit = "split"
)

// KnownOutcome says whether o is one of the outcomes a target may name.
func KnownOutcome(o string) bool {
	return o == OutcomeRunning || o == OutcomeStopped || o == OutcomeSplit
}
