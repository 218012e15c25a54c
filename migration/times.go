package migration

import (
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// EndedTimes is what libvirt's completed-job statistics say of one ended
// migration job: how long the guest stood still and how long the job
// took. Each is zero when libvirt left its field out: the decoded
// statistics cannot tell a missing field from 0, and no migration stops
// its guest for 0 ms, so a figure libvirt did not give is never made up.
type EndedTimes struct {
	Role     api.Role
	Result   string
	Downtime time.Duration
	Duration time.Duration
}

// finalOf says whether libvirt's completed-job statistics s are the ended
// job j's own: of its direction, of its outcome, and not an older job's.
func finalOf(j *job, s libvirtx.JobStats) bool {
	op := libvirtx.OperationMigrationOut
	if j.view.Role == api.RoleTarget {
		op = libvirtx.OperationMigrationIn
	}
	// libvirt keeps the last completed record until another job completes:
	// one that ran shorter than this job was seen running is an older job's.
	if s.Operation != op || s.TimeElapsedMs != 0 && s.TimeElapsedMs+1000 < j.view.ElapsedMs {
		return false
	}
	if j.view.Phase == api.PhaseCompleted {
		return s.Type == libvirtx.JobCompleted
	}
	return s.Type == libvirtx.JobFailed || s.Type == libvirtx.JobCancelled
}

// takeFinal takes s as the ended job j's completed-job statistics if they
// are its own, and queues its times for Config.OnTimes, once per job; the
// caller holds t.mu.
func (t *Tracker) takeFinal(j *job, s libvirtx.JobStats) bool {
	if !finalOf(j, s) {
		return false
	}
	delete(t.finals, jobKey{j.view.Socket, j.view.Domain})
	if j.timed || j.recovered {
		return true
	}
	j.timed = true
	e := EndedTimes{Role: j.view.Role, Result: resultLabel(j.view.Phase),
		Downtime: time.Duration(s.DowntimeMs) * time.Millisecond, Duration: time.Duration(s.TimeElapsedMs) * time.Millisecond}
	if e.Downtime > 0 || e.Duration > 0 {
		t.timed = append(t.timed, e)
	}
	return true
}

// finishWith ends j as finish does, with libvirt's completed-job
// statistics s already in hand; the caller holds t.mu.
func (t *Tracker) finishWith(j *job, phase api.Phase, reason string, at time.Time, s libvirtx.JobStats) {
	t.finish(j, phase, reason, at)
	t.takeFinal(j, s)
}

// reportTimes hands times queued under t.mu to Config.OnTimes; called
// without it.
func (t *Tracker) reportTimes(timed []EndedTimes) {
	if t.cfg.OnTimes == nil {
		return
	}
	for _, e := range timed {
		t.cfg.OnTimes(e)
	}
}
