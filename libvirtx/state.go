package libvirtx

import "fmt"

// State is libvirt's virDomainState.
type State int32

// The domain states Ferry reasons about (values from libvirt-domain.h).
const (
	StateNoState     State = 0
	StateRunning     State = 1
	StateBlocked     State = 2
	StatePaused      State = 3
	StateShutdown    State = 4
	StateShutoff     State = 5
	StateCrashed     State = 6
	StatePMSuspended State = 7
)

// Running and paused reasons that mark a migration (libvirt-domain.h).
const (
	RunningMigrated       int32 = 2
	RunningUnpaused       int32 = 5
	RunningPostCopy       int32 = 10
	RunningPostCopyFailed int32 = 11
	PausedUser            int32 = 1
	PausedMigration       int32 = 2
	PausedPostCopy        int32 = 12
	PausedPostCopyFailed  int32 = 13
	ShutoffMigrated       int32 = 4
	CrashedReasonPanicked int32 = 1
	ShutoffDestroyed      int32 = 2
	ShutoffFailed         int32 = 6
	ShutoffDaemon         int32 = 8
)

// StoppedIncoming says whether a shut-off domain's reason is one libvirt
// gives an incoming guest it stopped before the migration handed it over:
// its Finish failed (failed), the connection that prepared it closed
// (destroyed), or libvirtd restarted before Finish started its vCPUs
// (daemon). Any other shut-off reason says the guest ran.
func StoppedIncoming(reason int32) bool {
	switch reason {
	case ShutoffFailed, ShutoffDestroyed, ShutoffDaemon:
		return true
	}
	return false
}

// InPostCopy says whether a domain is in a post-copy migration, going on or
// broken, on either side: the source is paused in it, the target runs (or,
// once broken, is paused too). Its memory may be split between two hosts,
// so nothing may end either copy.
func InPostCopy(s State, reason int32) bool {
	switch s {
	case StateRunning:
		return reason == RunningPostCopy || reason == RunningPostCopyFailed
	case StatePaused:
		return reason == PausedPostCopy || reason == PausedPostCopyFailed
	}
	return false
}

// Coming says whether libvirt shows an incoming guest still coming: held
// paused for its migration, or in post-copy (its incoming job lasts until
// its Finish).
func Coming(s State, reason int32) bool {
	return s == StatePaused && reason == PausedMigration || InPostCopy(s, reason)
}

// PostCopyGoesOn says whether a post-copy migration still runs as libvirt
// shows it on the source's or the target's side: not broken.
func PostCopyGoesOn(source bool, s State, reason int32) bool {
	if source {
		return s == StatePaused && reason == PausedPostCopy
	}
	return s == StateRunning && reason == RunningPostCopy
}

var stateNames = []string{"nostate", "running", "blocked", "paused", "shutdown", "shutoff", "crashed", "pmsuspended"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

var reasonNames = map[State][]string{
	StateNoState: {"unknown"},
	StateRunning: {"unknown", "booted", "migrated", "restored", "from-snapshot", "unpaused",
		"migration-canceled", "save-canceled", "wakeup", "crashed", "post-copy", "post-copy-failed"},
	StateBlocked: {"unknown"},
	StatePaused: {"unknown", "user", "migration", "save", "dump", "ioerror", "watchdog",
		"from-snapshot", "shutting-down", "snapshot", "crashed", "starting-up", "post-copy",
		"post-copy-failed", "api-error"},
	StateShutdown: {"unknown", "user"},
	StateShutoff: {"unknown", "shutdown", "destroyed", "crashed", "migrated", "saved", "failed",
		"from-snapshot", "daemon"},
	StateCrashed:     {"unknown", "panicked"},
	StatePMSuspended: {"unknown"},
}

// ReasonName names the reason code of a domain in state s, as virsh does.
func ReasonName(s State, reason int32) string {
	names := reasonNames[s]
	if reason >= 0 && int(reason) < len(names) {
		return names[reason]
	}
	return fmt.Sprintf("reason(%d)", reason)
}

// Event types and the details Ferry acts on (virDomainEventType and friends).
const (
	EventDefined   int32 = 0
	EventUndefined int32 = 1
	EventStarted   int32 = 2
	EventSuspended int32 = 3
	EventResumed   int32 = 4
	EventStopped   int32 = 5
	EventShutdown  int32 = 6
	EventPMSuspend int32 = 7
	EventCrashed   int32 = 8

	StartedMigrated         int32 = 1
	SuspendedPaused         int32 = 0
	ResumedUnpaused         int32 = 0
	CrashedPanicked         int32 = 0
	SuspendedMigrated       int32 = 1
	SuspendedPostCopy       int32 = 7
	SuspendedPostCopyFailed int32 = 8
	ResumedMigrated         int32 = 1
	ResumedPostCopy         int32 = 3
	ResumedPostCopyFailed   int32 = 4
	StoppedMigrated         int32 = 3
	StoppedCrashed          int32 = 2
	StoppedFailed           int32 = 5
)

var eventNames = []string{"defined", "undefined", "started", "suspended", "resumed", "stopped", "shutdown", "pmsuspended", "crashed"}

var eventDetailNames = map[int32][]string{
	EventDefined:   {"added", "updated", "renamed", "from-snapshot"},
	EventUndefined: {"removed", "renamed"},
	EventStarted:   {"booted", "migrated", "restored", "from-snapshot", "wakeup", "recreated"},
	EventSuspended: {"paused", "migrated", "ioerror", "watchdog", "restored", "from-snapshot",
		"api-error", "post-copy", "post-copy-failed"},
	EventResumed:   {"unpaused", "migrated", "from-snapshot", "post-copy", "post-copy-failed"},
	EventStopped:   {"shutdown", "destroyed", "crashed", "migrated", "saved", "failed", "from-snapshot"},
	EventShutdown:  {"finished", "guest", "host"},
	EventPMSuspend: {"memory", "disk"},
	EventCrashed:   {"panicked", "crashloaded"},
}

// EventName names a lifecycle event and its detail, e.g. "suspended/post-copy".
func EventName(event, detail int32) string {
	ev := fmt.Sprintf("event(%d)", event)
	if event >= 0 && int(event) < len(eventNames) {
		ev = eventNames[event]
	}
	det := fmt.Sprintf("%d", detail)
	if names := eventDetailNames[event]; detail >= 0 && int(detail) < len(names) {
		det = names[detail]
	}
	return ev + "/" + det
}
