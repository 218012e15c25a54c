package migration

import (
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// An input is one thing the tracker learned about a domain on a libvirt
// socket. Every input (lifecycle and iteration events, job statistics
// readings, domain listings, the outcome of an ended libvirt job, a socket
// that went away, a record found after a restart) goes through apply, under
// one lock, and every domain state is read through one table (transitions),
// so an outcome such as post-copy-failed is decided in one place.
type input struct {
	kind   inputKind
	socket string
	dom    libvirt.Domain
	// at is when the input was true: an event's arrival, or the moment a
	// reading was requested (its reply proves nothing about earlier times).
	at time.Time
	// got is when a reading's reply arrived.
	got time.Time

	state  libvirtx.State
	reason int32
	event  libvirtx.Event
	stats  libvirtx.JobStats
	err    error
	// serr is the error of the domain state read that goes with an ended
	// job's completed statistics.
	serr error
	cpu  *libvirtx.QEMUCPU
	list []libvirtx.Domain
	why  string
	qemu string
}

type inputKind int

const (
	inLifecycle  inputKind = iota // a lifecycle event
	inIteration                   // a migration-iteration event
	inList                        // every active domain of a socket with its state
	inStats                       // an active job statistics reading (or its error)
	inEnded                       // completed-job statistics and state, after the libvirt job went away
	inFinal                       // completed-job statistics of a completed target job
	inSocketGone                  // the libvirt socket itself was removed
	inQEMUStatus                  // QEMU's own word on a source's migration (qemu: its status)
)

// followUp is what the caller of apply must read from libvirt next.
type followUp int

const (
	nothing followUp = iota
	// sample: read the domain's job statistics now (an event said
	// something changed, or needs confirming before a job is opened).
	sample
	// settle: read how the domain's ended libvirt job ended.
	settle
	// settleLater: the domain vanished; give libvirt's lifecycle event a
	// moment to say why before settling from what is left.
	settleLater
	// askQEMU: read QEMU's own migration status, before libvirt's word
	// that a source's post-copy failed is taken.
	askQEMU
)

// transition is one row of the table: what a domain in a state means for a
// job of a role. end ends the job; mode changes how memory moves.
type transition struct {
	role   api.Role
	state  libvirtx.State
	reason int32    // anyReason matches every reason
	from   api.Mode // "" matches every mode
	end    api.Phase
	mode   api.Mode
	why    string // %s is the state/reason
}

const anyReason int32 = -1

var transitions = []transition{
	{role: api.RoleSource, state: libvirtx.StatePaused, reason: libvirtx.PausedPostCopyFailed, end: api.PhasePostCopyFailed,
		why: "post-copy failed: source paused (%s); the guest's memory is split across two hosts"},
	// Normal post-copy keeps the source paused: running here means the
	// source QEMU resumed its own vCPUs after post-copy failed.
	{role: api.RoleSource, state: libvirtx.StateRunning, reason: libvirtx.RunningPostCopy, end: api.PhasePostCopyFailed,
		why: "post-copy failed: the source resumed its own vCPUs (%s), split brain with the target"},
	{role: api.RoleSource, state: libvirtx.StateRunning, reason: libvirtx.RunningPostCopyFailed, end: api.PhasePostCopyFailed,
		why: "post-copy failed: the source resumed its own vCPUs (%s), split brain with the target"},
	{role: api.RoleSource, state: libvirtx.StatePaused, reason: libvirtx.PausedPostCopy, mode: api.ModePostCopy},
	// A guest paused by a client mid pre-copy migrates as a paused guest:
	// nothing dirties memory any more, so it will converge.
	{role: api.RoleSource, state: libvirtx.StatePaused, reason: libvirtx.PausedUser, from: api.ModePreCopy, mode: api.ModePaused,
		why: "guest paused by a client (%s): migrating a paused guest"},
	{role: api.RoleSource, state: libvirtx.StateRunning, reason: anyReason, from: api.ModePaused, mode: api.ModePreCopy,
		why: "guest resumed (%s): back to pre-copy"},
	{role: api.RoleSource, state: libvirtx.StateShutoff, reason: libvirtx.ShutoffMigrated, end: api.PhaseCompleted},
	{role: api.RoleSource, state: libvirtx.StateShutoff, reason: anyReason, end: api.PhaseFailed,
		why: "the domain stopped during the migration (%s)"},
	{role: api.RoleSource, state: libvirtx.StateCrashed, reason: anyReason, end: api.PhaseFailed,
		why: "the domain crashed during the migration (%s)"},

	{role: api.RoleTarget, state: libvirtx.StateRunning, reason: libvirtx.RunningPostCopyFailed, end: api.PhasePostCopyFailed,
		why: "post-copy failed: target running without the pages left on the source (%s)"},
	// A target paused when post-copy fails keeps its own pause reason in
	// libvirt's state; the event says paused/post-copy-failed.
	{role: api.RoleTarget, state: libvirtx.StatePaused, reason: libvirtx.PausedPostCopyFailed, end: api.PhasePostCopyFailed,
		why: "post-copy failed: target paused without the pages left on the source (%s)"},
	{role: api.RoleTarget, state: libvirtx.StateRunning, reason: libvirtx.RunningMigrated, end: api.PhaseCompleted},
	{role: api.RoleTarget, state: libvirtx.StateRunning, reason: libvirtx.RunningPostCopy, mode: api.ModePostCopy},
	{role: api.RoleTarget, state: libvirtx.StateShutoff, reason: libvirtx.ShutoffFailed, end: api.PhaseFailed,
		why: "incoming migration failed: the target domain was stopped (%s); the source aborted or the migration stream broke"},
	{role: api.RoleTarget, state: libvirtx.StateShutoff, reason: anyReason, end: api.PhaseFailed,
		why: "the target domain stopped during the migration (%s)"},
	{role: api.RoleTarget, state: libvirtx.StateCrashed, reason: anyReason, end: api.PhaseFailed,
		why: "the target domain crashed during the migration (%s)"},
}

// lookup finds the first row that matches; ok=false means the state says
// nothing about the job.
func lookup(role api.Role, mode api.Mode, st libvirtx.State, reason int32) (transition, bool) {
	for _, tr := range transitions {
		if tr.role == role && tr.state == st && (tr.reason == anyReason || tr.reason == reason) &&
			(tr.from == "" || tr.from == mode) {
			return tr, true
		}
	}
	return transition{}, false
}

// postCopyFailedState reports a state that only a failed post-copy
// migration leaves, and which side it marks.
func postCopyFailedState(st libvirtx.State, reason int32) (api.Role, bool) {
	switch {
	case st == libvirtx.StatePaused && reason == libvirtx.PausedPostCopyFailed:
		return api.RoleSource, true
	case st == libvirtx.StateRunning && reason == libvirtx.RunningPostCopyFailed:
		return api.RoleTarget, true
	}
	return "", false
}

// eventState is the domain state a lifecycle event puts the domain in, as
// far as the table cares; ok=false for events that imply none of them.
func eventState(event, detail int32) (libvirtx.State, int32, bool) {
	switch event {
	case libvirtx.EventSuspended:
		switch detail {
		case libvirtx.SuspendedPaused:
			return libvirtx.StatePaused, libvirtx.PausedUser, true
		case libvirtx.SuspendedMigrated:
			return libvirtx.StatePaused, libvirtx.PausedMigration, true
		case libvirtx.SuspendedPostCopy:
			return libvirtx.StatePaused, libvirtx.PausedPostCopy, true
		case libvirtx.SuspendedPostCopyFailed:
			return libvirtx.StatePaused, libvirtx.PausedPostCopyFailed, true
		}
	case libvirtx.EventResumed:
		switch detail {
		case libvirtx.ResumedUnpaused:
			return libvirtx.StateRunning, libvirtx.RunningUnpaused, true
		case libvirtx.ResumedMigrated:
			return libvirtx.StateRunning, libvirtx.RunningMigrated, true
		case libvirtx.ResumedPostCopy:
			return libvirtx.StateRunning, libvirtx.RunningPostCopy, true
		case libvirtx.ResumedPostCopyFailed:
			return libvirtx.StateRunning, libvirtx.RunningPostCopyFailed, true
		}
	case libvirtx.EventStopped:
		// Stopped details are the shutoff reasons shifted by one (the
		// reasons start with "unknown").
		return libvirtx.StateShutoff, detail + 1, true
	case libvirtx.EventCrashed:
		// After crashloaded the guest runs on (a crash kernel): no state.
		if detail == libvirtx.CrashedPanicked {
			return libvirtx.StateCrashed, libvirtx.CrashedReasonPanicked, true
		}
	}
	return 0, 0, false
}

func stateName(st libvirtx.State, reason int32) string {
	return st.String() + "/" + libvirtx.ReasonName(st, reason)
}
