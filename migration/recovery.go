package migration

import (
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
)

// Results of a recovery attempt, the label of its counter.
const (
	RecoveryResumed = "resumed"
	RecoveryFailed  = "failed"
)

// recoverable says whether a job whose post-copy failed is one Ferry
// resumes, and for how long; the caller holds t.mu.
func (t *Tracker) recoverable(j *job) (time.Duration, bool) {
	key := jobKey{j.view.Socket, j.view.Domain}
	if j.recoveryOver {
		return 0, false
	}
	switch j.view.Role {
	case api.RoleSource:
		if d, ok := t.driving(key); ok && !d.Ended && d.RecoverFor > 0 {
			return d.RecoverFor, true
		}
	case api.RoleTarget:
		if p, ok := t.preparing(key); ok && p.ID == j.view.IncomingID && p.RecoverFor > 0 {
			return p.RecoverFor, true
		}
	}
	return 0, false
}

// pause holds a failed post-copy job as paused instead of ending it; the
// caller holds t.mu.
func (t *Tracker) pause(j *job, recoverFor time.Duration, reason string, at time.Time) {
	if j.view.Phase == api.PhasePostCopyPaused {
		return
	}
	j.pauses++
	pause := j.pauses
	j.view.Phase = api.PhasePostCopyPaused
	j.view.Mode = api.ModePostCopy
	j.view.FailureReason = reason
	j.view.EtaSeconds = nil
	j.view.UpdateTime = at
	// Each pause has its own time to come back.
	j.recoveryToChange().Until = at.Add(recoverFor)
	t.addEvent(j, at, "postcopy-paused", fmt.Sprintf("post-copy broke (%s); the guest is held paused on both nodes while the migration is resumed, until %s", reason, j.view.Recovery.Until.UTC().Format(time.RFC3339)))
	t.log.Warn("post-copy paused for recovery", zap.String("domain", j.view.Domain), zap.String("role", string(j.view.Role)), zap.Time("until", j.view.Recovery.Until))
	t.publish(j)
	t.recoveryChanged(j, RecoveryPaused)
	if j.view.Role == api.RoleSource {
		// The driver says when it is overdue: its deadline moves (a
		// resume, a stream that never broke), this clock would not.
		return
	}
	// A target hears of no attempts while the path is down. Past its time
	// it shows overdue, and stays paused: only its source, or an operator
	// (ferryctl give-up), ends a recovery.
	time.AfterFunc(recoverFor+recoveryGrace, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if cur := t.jobs[jobKey{j.view.Socket, j.view.Domain}]; cur == j && j.view.Phase == api.PhasePostCopyPaused && j.pauses == pause {
			t.overdue(j, time.Now())
		}
	})
}

// overdue shows a paused job past its recovery timeout; the caller holds
// t.mu.
func (t *Tracker) overdue(j *job, at time.Time) {
	if j.view.Recovery == nil || j.view.Recovery.Overdue {
		return
	}
	j.recoveryToChange().Overdue = true
	j.view.UpdateTime = at
	t.addEvent(j, at, "recovery-overdue", "post-copy still paused past --postcopy-recovery-timeout; the recovery goes on until it resumes or an operator gives up (ferryctl give-up)")
	t.log.Error("post-copy recovery overdue", zap.String("domain", j.view.Domain), zap.String("role", string(j.view.Role)))
	t.publish(j)
}

// recoveryToChange gives the job its own copy of its recovery to change:
// the views handed out (Job, Snapshot, the hooks) share the one before,
// and read it without the tracker's lock.
func (j *job) recoveryToChange() *api.Recovery {
	var rc api.Recovery
	if j.view.Recovery != nil {
		rc = *j.view.Recovery
	}
	j.view.Recovery = &rc
	return &rc
}

// unpause shows a paused job running in post-copy again; the caller holds
// t.mu.
func (t *Tracker) unpause(j *job, state string, at time.Time) {
	j.view.Phase = api.PhaseRunning
	j.view.UpdateTime = at
	t.addEvent(j, at, "postcopy-resumed", "the migration runs again in post-copy ("+state+")")
	t.publish(j)
}

// RecoveredDomain is a domain whose post-copy was recorded failed and
// completed since: libvirt runs it as migrated on this node.
type RecoveredDomain struct {
	Socket, Domain, UUID string
	Namespace, Name      string
}

// postCopyCompletedAfterAll records a failed post-copy that libvirt then
// completed (it does, unattended, when only the API call failed and QEMU's
// stream went on); the caller holds t.mu.
func (t *Tracker) postCopyCompletedAfterAll(r ledgerRecord, at time.Time) {
	if last := t.latest[jobKey{r.Socket, r.Domain}]; last != nil && last.view.UUID == r.UUID {
		t.addEvent(last, at, "postcopy-completed", "the post-copy recorded failed completed after all: libvirt runs the guest here as migrated")
		t.publish(last)
	}
	t.log.Warn("a post-copy recorded failed completed after all", zap.String("domain", r.Domain), zap.String("socket", r.Socket))
	if t.cfg.OnRecovered != nil {
		d := RecoveredDomain{Socket: r.Socket, Domain: r.Domain, UUID: r.UUID}
		d.Namespace, d.Name, _ = vmiName(r.Domain)
		go t.cfg.OnRecovered(d)
	}
}

// What changed in a recovery, for OnRecovery.
const (
	RecoveryPaused        = "paused"
	RecoveryAttemptFailed = "attempt-failed"
	RecoveryResumedStream = "resumed"
)

// recoveryChanged hands the source's job to OnRecovery; the caller holds
// t.mu.
func (t *Tracker) recoveryChanged(j *job, what string) {
	if t.cfg.OnRecovery != nil && j.view.Role == api.RoleSource {
		v := j.view
		v.Recovery = new(api.Recovery)
		*v.Recovery = *j.view.Recovery
		go t.cfg.OnRecovery(v, what)
	}
}

// recoveryGrace lets the source's own end of a recovery arrive first.
var recoveryGrace = 30 * time.Second

// giveUp ends a paused job as PostCopyFailed; the caller holds t.mu.
func (t *Tracker) giveUp(j *job, why string, at time.Time) {
	// Ferry's own word: QEMU was asked by the recovery itself.
	j.recoveryOver, j.qemuSaid = true, true
	j.view.Phase = api.PhaseRunning // finish() takes only a job not ended
	reason := why
	if j.view.FailureReason != "" {
		reason = why + ": " + j.view.FailureReason
	}
	t.finish(j, api.PhasePostCopyFailed, reason, at)
}

// pausedJob is the domain's paused job in the given role; the caller
// holds t.mu.
func (t *Tracker) pausedJob(socket, domain string, role api.Role) *job {
	j := t.jobs[jobKey{socket, domain}]
	if j == nil || j.view.Role != role || j.view.Phase != api.PhasePostCopyPaused {
		return nil
	}
	return j
}

// DrivePaused says the driver resumes the domain's broken post-copy until
// the given time.
func (b Books) DrivePaused(socket, domain string, until time.Time) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.pausedJob(socket, domain, api.RoleSource); j != nil {
		rc := j.recoveryToChange()
		rc.Until, rc.Overdue = until, false
		t.publish(j)
	}
}

// DriveRecoveryOverdue says the driver's recovery of the domain's post-copy
// has passed its timeout and goes on.
func (b Books) DriveRecoveryOverdue(socket, domain string) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.pausedJob(socket, domain, api.RoleSource); j != nil {
		t.overdue(j, time.Now())
	}
}

// IncomingGiveUp ends the domain's paused incoming post-copy as failed, on
// an operator's word; false when none is paused here.
func (b Books) IncomingGiveUp(socket, domain string) bool {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	var found *job
	for key, j := range t.jobs {
		if key.domain != domain || socket != "" && key.socket != socket ||
			j.view.Role != api.RoleTarget || j.view.Phase != api.PhasePostCopyPaused {
			continue
		}
		if found != nil {
			// Two sockets hold the name: the operator must name one.
			return false
		}
		found = j
	}
	if found != nil {
		t.giveUp(found, "an operator gave up its recovery (ferryctl give-up)", time.Now())
		return true
	}
	return false
}

// DriveRecoveryAttempt records an attempt to resume the domain's post-copy
// that ended with err: one that never resumed counts as failed.
func (b Books) DriveRecoveryAttempt(socket, domain string, attempt int, err error) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.pausedJob(socket, domain, api.RoleSource)
	if j == nil || j.lastResumed != attempt {
		t.recoveryAttempts[RecoveryFailed]++
	}
	if j == nil {
		return
	}
	now := time.Now()
	rc := j.recoveryToChange()
	rc.Attempts = attempt
	if err != nil {
		rc.LastError = err.Error()
	}
	t.addEvent(j, now, "recovery", fmt.Sprintf("attempt %d failed: %v", attempt, err))
	j.view.UpdateTime = now
	t.publish(j)
	t.recoveryChanged(j, RecoveryAttemptFailed)
}

// DriveResumed records an attempt whose stream went on: the guest runs
// again on the target, took after the resume.
func (b Books) DriveResumed(socket, domain string, attempt int, took time.Duration) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[jobKey{socket, domain}]
	if j == nil || j.view.Role != api.RoleSource || j.view.Recovery == nil {
		return
	}
	if j.lastResumed >= attempt {
		return
	}
	t.recoveryAttempts[RecoveryResumed]++
	now := time.Now()
	rc := j.recoveryToChange()
	rc.Attempts, j.lastResumed = attempt, attempt
	rc.Resumed++
	t.addEvent(j, now, "recovery", fmt.Sprintf("attempt %d resumed the migration %v after the resume", attempt, took.Round(time.Millisecond)))
	j.view.UpdateTime = now
	t.publish(j)
	t.recoveryChanged(j, RecoveryResumedStream)
}

// DriveRearmed shows again, as paused, a post-copy whose recovery an
// operator gave up and now starts again (ferryctl recover); the caller has
// said it is driven and recoverable. Its failure stays counted, once.
func (b Books) DriveRearmed(socket string, dom libvirt.Domain) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	key := jobKey{socket, dom.Name}
	last := t.latest[key]
	if t.jobs[key] != nil || last == nil || last.view.Role != api.RoleSource || last.view.Phase != api.PhasePostCopyFailed {
		return
	}
	now := time.Now()
	j := t.newJob(socket, dom, api.RoleSource, last.view.StartTime, "post-copy recovery started again by an operator (ferryctl recover)")
	j.view.Mode = api.ModePostCopy
	j.view.DomainState = last.view.DomainState
	j.recovered = true
	t.finish(j, api.PhasePostCopyFailed, "post-copy failed, was given up, and is resumed again", now)
}
