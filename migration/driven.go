package migration

import (
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// InFlight reports whether the domain has a migration job in flight.
func (t *Tracker) InFlight(socket, domain string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.jobs[jobKey{socket, domain}]
	return ok
}

// NoteAll records an event on every in-flight job (e.g. the migration
// network's link going down), as evidence for whatever happens next.
func (b Books) NoteAll(kind, detail string) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for _, j := range t.jobs {
		t.addEvent(j, now, kind, detail)
		t.publish(j)
	}
}

// Note records an event on the domain's in-flight source job on socket.
// One that repeats a recent event is not kept twice: a request asked again
// and again must not push the evidence before it out.
func (b Books) Note(socket, domain, kind, detail string) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if j, ok := t.jobs[jobKey{socket, domain}]; ok && j.view.Role == api.RoleSource {
		if t.addEventOnce(j, time.Now(), kind, detail) {
			t.publish(j)
		}
	}
}

// addEventOnce adds an event unless one of the job's last few says the
// same (a request and its refusal, asked again and again); the caller
// holds t.mu.
func (t *Tracker) addEventOnce(j *job, at time.Time, kind, detail string) bool {
	recent := j.events.slice()
	for i := len(recent) - 1; i >= 0 && i >= len(recent)-4; i-- {
		if recent[i].Kind == kind && recent[i].Detail == detail {
			return false
		}
	}
	t.addEvent(j, at, kind, detail)
	return true
}

// settledJobWithin bounds how long after the driver's start a job may have
// begun and still be the migration's.
const settledJobWithin = 5 * time.Minute

// DriveSettled shows the end of a migration a previous ferryd of this
// node was driving when it stopped, settled with the target since (the
// driver's account says how it ended, phase in the tracker's words): its
// job was lost with that process, so one is made for it, unless this
// tracker already has one from after its start.
func (b Books) DriveSettled(socket, domain, uuid string, phase api.Phase) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	key := jobKey{socket, domain}
	// This account, even if a job that ended showed it already (the
	// driver began it before it settled it): that job is the migration's.
	d, ok := t.account(key)
	if !ok || !d.Ended {
		return
	}
	start := d.Begun
	// The migration's own job, if this process has seen it: the same
	// guest, begun when the driver began it (Begin to Perform is short).
	ours := func(j *job) bool {
		return j.view.Role == api.RoleSource && (uuid == "" || j.view.UUID == uuid) &&
			!j.view.StartTime.Before(start.Add(-2*time.Second)) && j.view.StartTime.Before(start.Add(settledJobWithin))
	}
	if j, ok := t.jobs[key]; ok && ours(j) && !d.Shown {
		// Still running: its end takes the driver's account, as a driven
		// job's does.
		j.setProxy(d.Proxy)
		t.publish(j)
		return
	}
	// Whatever comes next, no later job of the name takes this account.
	t.shown(key, d)
	if _, ok := t.jobs[key]; ok {
		return
	}
	if j := t.latest[key]; j != nil && !j.view.StartTime.Before(start.Add(-2*time.Second)) {
		if ours(j) {
			t.settledSeen(j, d, phase)
		}
		return
	}
	ref := libvirt.Domain{Name: domain}
	if dom, ok := t.domains[socket][domain]; ok {
		ref = dom.Ref
	}
	j := t.newJob(socket, ref, api.RoleSource, start, "migration driven by Ferry, settled after ferryd restarted")
	j.setProxy(d.Proxy)
	t.finish(j, phase, d.Failure, time.Now())
}

// settledSeen gives a job this process saw to its end, knowing nothing of
// the driver, the driver's settled account: the job is the migration's,
// and names it now. The caller holds t.mu.
func (t *Tracker) settledSeen(j *job, d Driving, phase api.Phase) {
	j.setProxy(d.Proxy)
	lost := j.view.Phase == api.PhaseLost && phase == api.PhaseCompleted
	switch {
	case lost:
		t.completedByDriver(j, time.Now(), driverSettledIt)
		t.classify(j, time.Now())
	case d.Failure != "" && j.view.Phase == api.PhaseFailed && phase == api.PhaseFailed:
		j.view.FailureReason = d.Failure
		t.classify(j, time.Now())
	}
	t.driverWordTaken(j, lost)
}

// driverWordTaken counts an ended job that waited for the driver's word,
// under its final class, shows it, and, when the word turned it from lost
// to completed, tells it again: what acts on an ended job (a VMI's
// recovery mark) heard only that it was lost. The caller holds t.mu.
func (t *Tracker) driverWordTaken(j *job, corrected bool) {
	if j.countPending {
		j.countPending = false
		t.count(j)
	}
	t.publish(j)
	if corrected && t.cfg.OnFinish != nil {
		v := j.view
		go t.cfg.OnFinish(v)
	}
}

// DriveInDoubt shows the domain's driven source job in doubt: the target
// has not said whether the guest runs there. libvirt's job ends it, once
// the driver has settled the migration.
func (b Books) DriveInDoubt(socket, domain, why string) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for k, j := range t.jobs {
		// A paused post-copy is not in doubt: its copies are held on both
		// nodes, and its recovery says what becomes of them.
		if k.domain == domain && k.socket == socket && j.view.Role == api.RoleSource && j.view.Phase != api.PhasePostCopyPaused {
			j.view.Phase, j.view.FailureReason, j.view.UpdateTime = api.PhaseInDoubt, why, now
			t.addEvent(j, now, "in-doubt", why)
			t.publish(j)
		}
	}
}

// DriveBegan shows the driver's account of the migration of domain it
// now drives from socket on the domain's job, from its first moment.
func (b Books) DriveBegan(socket, domain string) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.driving(jobKey{socket, domain})
	if !ok {
		return
	}
	for k, j := range t.jobs {
		if k.domain == domain && k.socket == socket && j.view.Role == api.RoleSource {
			j.setProxy(d.Proxy)
			t.publish(j)
		}
	}
}

// setProxy puts a driven migration's proxy account on the job, and the
// target node it names as the job's peer.
func (j *job) setProxy(info *api.ProxyInfo) {
	j.view.Proxy = info
	if info != nil && info.TargetNode != "" {
		j.view.PeerNode = info.TargetNode
	}
}

// PrepareFailed records a Ferry-driven migration that failed before
// libvirt started a job (the target refused or never answered the
// prepare): nothing else would, and its failure is counted and classified
// like any other.
func (b Books) PrepareFailed(domain string, ref libvirt.Domain, socket string, start time.Time, info api.ProxyInfo, failure string) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.newJob(socket, ref, api.RoleSource, start, "migration driven by Ferry")
	j.setProxy(&info)
	t.finish(j, api.PhaseFailed, failure, time.Now())
}

// DriveEnded shows the driver's final word on the migration of domain
// (ref, when libvirt named it) from socket: proxy figures and, if the migrate call failed, its reason, which
// replaces the tracker's own guess (libvirt keeps no record of why a
// migration failed; the driver heard it). With no job to put it on (the
// migration failed before libvirt started a job) a failed job is recorded
// so the failure is not lost, and a completed one so that its completion
// is not.
func (b Books) DriveEnded(domain string, ref libvirt.Domain, socket string) {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	key := jobKey{socket, domain}
	// This account, even if a job that ended took it already: that job's
	// count waits for it (driverPending in finish).
	if t.cfg.Driver == nil {
		return
	}
	d, ok := t.cfg.Driver.Driving(socket, domain)
	if !ok || !d.Ended {
		return
	}
	start, info, failure := d.Begun, d.Proxy, d.Failure
	var best *job
	for k, j := range t.jobs {
		// A job running now is not the migration's once one that ended
		// showed its account: it is a later one (a pod's own).
		if k.domain == domain && k.socket == socket && j.view.Role == api.RoleSource && !d.Shown {
			best = j
		}
	}
	if best == nil {
		// The migration's own ended job: the same guest, begun when the
		// driver began it.
		if j := t.latest[key]; j != nil && !j.view.StartTime.Before(start.Add(-2*time.Second)) &&
			j.view.StartTime.Before(start.Add(settledJobWithin)) && (j.view.UUID == "" || j.view.UUID == libvirtx.UUIDString(ref.UUID)) {
			best = j
		}
	}
	switch {
	case best == nil && failure != "":
		j := t.newJob(socket, ref, api.RoleSource, start, "migration driven by Ferry")
		j.setProxy(info)
		t.finish(j, api.PhaseFailed, failure, time.Now())
	case best == nil && !d.Shown:
		// Completed before any reading showed its job: libvirt's job says
		// it migrates only from Perform, which may last less than a
		// sampling interval (a small guest, a loaded libvirtd slow to
		// answer). The driver's word is the job; the completed-job
		// statistics are read after it where libvirt keeps them.
		j := t.newJob(socket, ref, api.RoleSource, start, "migration driven by Ferry, over before a reading showed its job")
		j.byDriver = true
		j.setProxy(info)
		t.finish(j, api.PhaseCompleted, "", time.Now())
	case best == nil:
	case best.view.Phase == api.PhasePostCopyPaused && failure != "":
		best.setProxy(info)
		t.giveUp(best, failure, time.Now())
	case best.view.Phase.Finished():
		best.setProxy(info)
		corrected := best.view.Phase == api.PhaseLost && failure == ""
		if corrected {
			t.completedByDriver(best, time.Now(), driverSawCompletion)
		}
		if failure != "" && (best.view.Phase == api.PhaseFailed || (best.view.Phase == api.PhaseAborted && byDeadline(failure))) {
			best.view.FailureReason = failure
		}
		// The driver's account may name what libvirt's could not (the
		// link, the proxy): the class follows it, and only now is the job
		// counted, under its final class.
		t.classify(best, time.Now())
		t.driverWordTaken(best, corrected)
	default:
		// Still running in the tracker's eyes; finish() applies the
		// driver's account when libvirt's job goes away.
		best.setProxy(info)
		t.publish(best)
	}
	if d.Shown || best == nil && failure == "" || best != nil && best.view.Phase.Finished() {
		// Nothing left for it to tell: a later migration of the name,
		// one Ferry does not drive, must not inherit it.
		t.shown(key, d)
	}
}

// The evidence on a job completed on the driver's word, by where the word
// comes from: the driver's own end of the migration (its Confirm, or a
// resumed post-copy that completed), or its settling with the target
// after ferryd restarted.
const (
	driverSawCompletion = "the driver's own connection saw the migration end, the guest running on the target; this node's monitoring connection had missed how it ended"
	driverSettledIt     = "the driver settled the migration with the target after ferryd restarted: the guest runs there; this node's monitoring connection had missed how it ended"
)

// completedByDriver takes the driver's word (why says which) for a driven
// job the tracker could only call lost: the domain went while this node's
// monitoring connection was cut (a libvirtd that froze, then went on) or
// before its lifecycle event came. The caller holds t.mu and classifies
// the job after.
func (t *Tracker) completedByDriver(j *job, at time.Time, why string) {
	t.addEvent(j, at, "driver", why)
	v := &j.view
	v.Phase, v.FailureReason, v.UpdateTime = api.PhaseCompleted, "", at
	v.ProgressPercent, v.DataRemainingBytes, v.MemoryRemainingBytes = 100, 0, 0
	if j.counted {
		t.recount(j)
	}
}
