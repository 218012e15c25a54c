package migration

import (
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// action is a follow-up read the caller of apply must make.
type action struct {
	dom  libvirt.Domain
	what followUp
}

// sameJobSlack bounds how far two estimates of one libvirt job's start may
// differ: each is a reply's arrival minus libvirt's elapsed time, so they
// differ by RPC latency, never by seconds.
const sameJobSlack = time.Second

// vanishGrace is how long a domain gone from libvirt's list is given for its
// lifecycle event to say why, before its job is settled from what is left:
// the list can show a domain gone before the event about it is read.
const vanishGrace = 2 * time.Second

// apply folds one input into the tracker and returns what to read next.
func (t *Tracker) apply(in input) []action {
	t.mu.Lock()
	acts := t.dispatch(in)
	acts = append(acts, t.takeAsks(in.socket)...)
	snap := t.ledger.snapshot()
	timed := t.timed
	t.timed = nil
	t.mu.Unlock()
	t.ledger.write(snap)
	t.reportTimes(timed)
	return acts
}

func (t *Tracker) dispatch(in input) []action {
	switch in.kind {
	case inLifecycle:
		return t.applyLifecycle(in)
	case inIteration:
		return t.applyIteration(in)
	case inList:
		return t.applyList(in)
	case inStats:
		return t.applyStats(in)
	case inEnded:
		t.applyEnded(in)
	case inFinal:
		t.applyFinal(in)
	case inSocketGone:
		t.applySocketGone(in)
	case inQEMUStatus:
		t.applyQEMUStatus(in)
	}
	return nil
}

func one(d libvirt.Domain, f followUp) []action { return []action{{dom: d, what: f}} }

func (t *Tracker) applyLifecycle(in input) []action {
	ev := in.event
	key := jobKey{in.socket, in.dom.Name}
	j := t.jobs[key]
	name := libvirtx.EventName(ev.Event, ev.Detail)
	st, rs, hasState := eventState(ev.Event, ev.Detail)
	if hasState {
		t.noteDomainState(in.socket, in.dom, st, rs, in.at)
	}
	incoming := (ev.Event == libvirtx.EventStarted && ev.Detail == libvirtx.StartedMigrated) ||
		(ev.Event == libvirtx.EventResumed && ev.Detail == libvirtx.ResumedPostCopy)
	if j == nil && incoming {
		j = t.openTarget(in, "incoming migration (libvirt event "+name+")")
	}
	if j == nil {
		if hasState {
			d := libvirtx.Domain{Ref: in.dom, Name: in.dom.Name, UUID: libvirtx.UUIDString(in.dom.UUID), State: st, Reason: rs}
			if role, ok := t.postCopyFailedRole(in.socket, d); ok {
				t.recordPostCopyFailed(in.socket, in.dom, role, st, rs, in.at, "libvirt event "+name)
				return nil
			}
		}
		if last := t.latest[key]; last != nil {
			t.addEvent(last, in.at, "libvirt", "lifecycle "+name+" (after the job ended)")
		}
		// A source job is opened only from libvirt's own job statistics:
		// this event may be a late one from a job that already ended.
		return one(in.dom, sample)
	}
	t.addEvent(j, in.at, "libvirt", "lifecycle "+name)
	if hasState {
		t.applyState(j, st, rs, in.at, "libvirt event "+name)
	}
	if j.view.Phase.Finished() {
		return nil
	}
	j.view.UpdateTime = in.at
	t.publish(j)
	if j.view.Role == api.RoleTarget {
		return nil // libvirt gives no statistics on the target
	}
	return one(in.dom, sample)
}

func (t *Tracker) applyIteration(in input) []action {
	j := t.jobs[jobKey{in.socket, in.dom.Name}]
	if j == nil || j.view.Role != api.RoleSource {
		// Confirmed (and the job opened) by the statistics it asks for.
		return one(in.dom, sample)
	}
	t.startIteration(j, uint64(in.event.Iteration), in.at)
	t.addEvent(j, in.at, "libvirt", in.event.String())
	t.publish(j)
	return one(in.dom, sample)
}

// applyList stores a socket's listing, applies each state to its job, and
// returns the domains whose statistics or outcome must be read.
func (t *Tracker) applyList(in input) []action {
	byName := make(map[string]libvirtx.Domain, len(in.list))
	for _, d := range in.list {
		byName[d.Name] = d
	}
	// A state an event told after this listing was asked is newer: keep it.
	old := t.domains[in.socket]
	for k, at := range t.stateAt {
		if k.socket != in.socket {
			continue
		}
		if !at.After(in.at) {
			delete(t.stateAt, k)
			continue
		}
		if d, ok := old[k.domain]; ok {
			byName[k.domain] = d
		} else {
			delete(byName, k.domain)
		}
	}
	t.domains[in.socket] = byName
	var out []action
	for k, j := range t.jobs {
		if k.socket != in.socket {
			continue
		}
		d, present := byName[k.domain]
		switch {
		case !present && in.at.Before(j.opened):
		case !present && t.vanish(j, in.at, "no longer in libvirt's list of active domains"):
			out = append(out, action{dom: j.ref, what: settleLater})
		case !present && in.at.Sub(j.vanished) >= vanishGrace:
			// An earlier settle was lost or could not read libvirt: ask again.
			out = append(out, action{dom: j.ref, what: settle})
		case present:
			j.vanished = time.Time{}
			t.applyState(j, d.State, d.Reason, in.at, "listing")
		}
	}
	for _, d := range byName {
		key := jobKey{in.socket, d.Name}
		if t.jobs[key] == nil {
			if last := t.latest[key]; last != nil {
				if st := stateName(d.State, d.Reason); last.view.DomainState != st {
					last.view.DomainState = st
					t.addEvent(last, in.at, "state", st+" (after the job ended)")
				}
			}
			if role, ok := t.postCopyFailedRole(in.socket, d); ok {
				t.recordPostCopyFailed(in.socket, d.Ref, role, d.State, d.Reason, in.at, "found in the domain listing")
				continue
			}
		}
		// Targets too: a guest migrated paused never shows running/migrated,
		// and only libvirt's job says its incoming migration ended.
		out = append(out, action{dom: d.Ref, what: sample})
	}
	t.askAgainAll(in.socket)
	completed := map[ledgerKey]ledgerRecord{}
	t.ledger.prune(in.socket, func(r ledgerRecord) bool {
		d, ok := byName[r.Domain]
		if !ok || d.UUID != r.UUID {
			return false
		}
		tr, ok := lookup(r.Role, api.ModePostCopy, d.State, d.Reason)
		if r.Role == api.RoleTarget && d.State == libvirtx.StateRunning && d.Reason == libvirtx.RunningMigrated {
			completed[ledgerKey{r.Socket, r.UUID, r.Role}] = r
		}
		// Kept while it runs in post-copy again (resumed): it may yet
		// complete, or fail again, and is the same failure.
		return ok && tr.end == api.PhasePostCopyFailed || libvirtx.PostCopyGoesOn(r.Role == api.RoleSource, d.State, d.Reason)
	})
	for _, r := range completed {
		t.postCopyCompletedAfterAll(r, in.at)
	}
	return out
}

// postCopyFailedRole says whether a domain with no job in flight is in a
// state a failed post-copy leaves, and for which side: a side this node
// recorded, else the side the state alone implies.
func (t *Tracker) postCopyFailedRole(socket string, d libvirtx.Domain) (api.Role, bool) {
	implied, pcf := postCopyFailedState(d.State, d.Reason)
	for _, role := range []api.Role{api.RoleSource, api.RoleTarget} {
		if t.ledger.known(ledgerKey{socket, d.UUID, role}) {
			if tr, ok := lookup(role, api.ModePostCopy, d.State, d.Reason); pcf || ok && tr.end == api.PhasePostCopyFailed {
				return role, true
			}
		}
	}
	return implied, pcf
}

func (t *Tracker) applyStats(in input) []action {
	key := jobKey{in.socket, in.dom.Name}
	j := t.jobs[key]
	s, err := in.stats, in.err
	switch {
	case err != nil && libvirtx.IsTargetOnly(err), err == nil && s.Type.Active() && s.Operation == libvirtx.OperationMigrationIn:
		if j == nil {
			if j = t.openTarget(in, "incoming migration job in libvirt"); j != nil {
				t.applyKnownState(j, in.at)
			}
		} else if !in.at.Before(j.seen) {
			j.seen, j.vanished = in.at, time.Time{}
		}
	case err != nil && libvirtx.IsNoDomain(err):
		if j != nil && !in.at.Before(j.opened) && t.vanish(j, in.at, "libvirt says the domain no longer exists") {
			return one(j.ref, settleLater)
		}
	case err != nil:
		if j != nil && j.lastError != err.Error() {
			j.lastError = err.Error()
			t.addEvent(j, in.at, "sample-error", err.Error())
			t.publish(j)
		}
	case s.Type.Active() && s.Operation == libvirtx.OperationMigrationOut:
		if j == nil {
			if j = t.openSource(in); j == nil {
				return nil
			}
			t.applyKnownState(j, in.at)
		}
		if j.view.Role != api.RoleSource || in.at.Before(j.seen) {
			return nil // an older reading than one already applied
		}
		j.seen, j.vanished = in.at, time.Time{}
		t.applySample(j, s, in.cpu, in.got)
	case j != nil && !in.at.Before(j.seen):
		// libvirt's migration job is gone while the tracker still has it
		// running; a reading asked before the job was last seen active
		// proves nothing.
		return one(j.ref, settle)
	}
	return nil
}

// applyEnded settles a job whose libvirt job went away (or whose domain
// vanished) from the completed-job statistics and the domain's state.
func (t *Tracker) applyEnded(in input) {
	j := t.jobs[jobKey{in.socket, in.dom.Name}]
	if j == nil || in.at.Before(j.seen) {
		return
	}
	if in.serr == nil {
		t.noteDomainState(in.socket, in.dom, in.state, in.reason, in.at)
		t.applyState(j, in.state, in.reason, in.at, "state after the job ended")
		if j.view.Phase.Finished() {
			if in.err == nil {
				t.takeFinal(j, in.stats)
			}
			return
		}
		if in.state != libvirtx.StateShutoff {
			j.vanished = time.Time{} // still there: the listing raced its start
		}
	}
	pausedNote := ""
	if in.serr == nil && in.state == libvirtx.StatePaused {
		pausedNote = "; the guest was left paused on the source (" + libvirtx.ReasonName(in.state, in.reason) + ")"
	}
	op := libvirtx.OperationMigrationOut
	if j.view.Role == api.RoleTarget {
		op = libvirtx.OperationMigrationIn
	}
	// libvirt keeps the last completed record until another job completes:
	// one that ran shorter than this job was seen running is an older job's.
	if done := in.stats; in.err == nil && done.Operation == op && (done.TimeElapsedMs == 0 || done.TimeElapsedMs+1000 >= j.view.ElapsedMs) {
		j.view.DowntimeMs = done.DowntimeMs
		switch done.Type {
		case libvirtx.JobCompleted:
			if j.view.Role == api.RoleTarget && in.serr == nil && in.state != libvirtx.StateShutoff {
				// A guest migrated paused stays paused on the target.
				t.finishWith(j, api.PhaseCompleted, "", in.at, done)
				return
			}
		case libvirtx.JobCancelled:
			t.finishWith(j, api.PhaseAborted, "migration canceled"+withMsg(done.ErrMsg)+pausedNote, in.at, done)
			return
		case libvirtx.JobFailed:
			// libvirt's own word that the job failed, not was cancelled:
			// an abort asked meanwhile did not end it.
			j.failedInLibvirt = true
			t.finishWith(j, api.PhaseFailed, "migration failed"+withMsg(done.ErrMsg)+pausedNote, in.at, done)
			return
		}
	}
	switch {
	case in.serr != nil && libvirtx.IsNoDomain(in.serr) && j.view.Role == api.RoleTarget:
		t.finish(j, api.PhaseFailed, "incoming migration failed: the domain is gone from the target", in.at)
	case in.serr != nil && libvirtx.IsNoDomain(in.serr):
		t.finish(j, api.PhaseLost, "the domain disappeared from libvirt without a lifecycle event; libvirt keeps no record on this node of how its migration ended", in.at)
	case in.serr != nil:
		t.addEvent(j, in.at, "sample-error", in.serr.Error())
		t.publish(j)
	case j.view.Role == api.RoleSource && j.vanished.IsZero():
		t.finish(j, api.PhaseFailed, "migration job ended without completing; libvirt kept no statistics of why"+pausedNote, in.at)
	}
}

// applyFinal takes the completed-job statistics libvirt keeps of an ended
// job: its times, and on a completed target after pre-copy the only
// figures that side has.
func (t *Tracker) applyFinal(in input) {
	j := t.finals[jobKey{in.socket, in.dom.Name}]
	if j == nil {
		return
	}
	s := in.stats
	j.finalTries++
	switch {
	case in.err == nil && t.takeFinal(j, s):
		v := &j.view
		if v.Role == api.RoleTarget && v.Phase == api.PhaseCompleted {
			v.DataTotalBytes, v.DataProcessedBytes, v.DataRemainingBytes = s.DataTotal, s.DataProcessed, s.DataRemaining
			v.MemoryTotalBytes, v.MemoryRemainingBytes = s.MemoryTotal, s.MemoryRemaining
			v.TransferRateBytesPerSecond, v.DirtyRateBytesPerSecond = s.MemoryBps, s.MemoryDirtyRate
			v.Iteration, v.PostCopyRequests = s.MemoryIteration, s.MemoryPostCopyReqs
			v.ElapsedMs = s.TimeElapsedMs
		}
		v.DowntimeMs = s.DowntimeMs
		t.addEvent(j, in.at, "libvirt", "completed-job statistics read")
		t.publish(j)
	case j.finalTries >= finalTries:
		// libvirt keeps none after post-copy, nor of a transient domain
		// it removed: nothing more to learn.
		detail := "libvirt kept no completed-job statistics"
		if in.err != nil {
			detail += ": " + in.err.Error()
		}
		t.addEvent(j, in.at, "libvirt", detail)
		delete(t.finals, jobKey{in.socket, in.dom.Name})
	}
}

// finalTries bounds how many scans look for a target's completed-job
// statistics: libvirt stores them only once the domain has fully resumed.
const finalTries = 5

// applySocketGone ends the jobs of a libvirt socket that was removed (a
// virt-launcher pod deleted): whatever libvirt did next, this node can no
// longer see it, and a job left Running would keep its alerts firing.
func (t *Tracker) applySocketGone(in input) {
	for k, j := range t.jobs {
		if k.socket == in.socket {
			t.finish(j, api.PhaseLost, fmt.Sprintf("libvirt socket %s went away before libvirt said how the job ended (%s)", in.socket, in.why), in.at)
		}
	}
	for k := range t.finals {
		if k.socket == in.socket {
			delete(t.finals, k)
		}
	}
	delete(t.domains, in.socket)
	for k := range t.stateAt {
		if k.socket == in.socket {
			delete(t.stateAt, k)
		}
	}
	t.ledger.prune(in.socket, func(ledgerRecord) bool { return false })
}

// applyState reads a job's fate from its domain's state through the table.
func (t *Tracker) applyState(j *job, st libvirtx.State, reason int32, at time.Time, how string) {
	name := stateName(st, reason)
	if j.view.DomainState != name {
		j.view.DomainState = name
		t.addEvent(j, at, "state", name+" ("+how+")")
		t.publish(j)
	}
	if j.view.Phase == api.PhasePostCopyPaused && libvirtx.PostCopyGoesOn(j.view.Role == api.RoleSource, st, reason) {
		// libvirt saw QEMU take the resumed stream.
		t.unpause(j, name, at)
	}
	tr, ok := lookup(j.view.Role, j.view.Mode, st, reason)
	if !ok {
		return
	}
	if tr.end != "" {
		why := ""
		if tr.why != "" {
			why = fmt.Sprintf(tr.why, name)
		}
		t.finish(j, tr.end, why, at)
		return
	}
	if tr.mode != "" && tr.mode != j.view.Mode {
		j.view.Mode = tr.mode
		if tr.mode == api.ModePostCopy {
			j.view.Convergence = api.VerdictUnknown
			j.view.ConvergenceReason = "post-copy: the target pulls the remaining pages on demand"
			j.view.EtaSeconds = nil
		}
		detail := "now " + string(tr.mode)
		if tr.why != "" {
			detail = fmt.Sprintf(tr.why, name)
		}
		t.addEvent(j, at, "mode", detail)
		t.publish(j)
	}
}

// applyKnownState applies the domain's last known state to a new job.
func (t *Tracker) applyKnownState(j *job, at time.Time) {
	// A state of another QEMU process (an earlier ID) says nothing of this job.
	if d, ok := t.domains[j.view.Socket][j.view.Domain]; ok && (d.Ref.ID <= 0 || j.domID <= 0 || d.Ref.ID == j.domID) {
		t.applyState(j, d.State, d.Reason, at, "listing")
	}
}

// vanish notes that a job's domain is gone; it reports whether this is news.
func (t *Tracker) vanish(j *job, at time.Time, why string) bool {
	if !j.vanished.IsZero() {
		return false
	}
	j.vanished = at
	t.addEvent(j, at, "libvirt", why+"; waiting for libvirt's lifecycle event")
	t.publish(j)
	return true
}

// openTarget opens an incoming job unless this domain's QEMU process was
// already the target of a recorded one: a QEMU process receives one
// incoming migration in its life, and a new one has a new domain ID.
func (t *Tracker) openTarget(in input, why string) *job {
	key := jobKey{in.socket, in.dom.Name}
	if t.cfg.Trials != nil && t.cfg.Trials.Holds(key.socket, key.domain) {
		return nil
	}
	if last := t.latest[key]; last != nil && in.dom.ID > 0 && last.domID == in.dom.ID {
		// The same QEMU process: its incoming migration was recorded, or it
		// was the source (a source resuming in post-copy is no target).
		return nil
	}
	return t.newJob(in.socket, in.dom, api.RoleTarget, in.at, why)
}

// openSource opens an outgoing job from a reading of libvirt's active job,
// unless that libvirt job is one already recorded: a reading asked before
// the last job ended, a job that started when the last one did, or the job
// libvirt keeps "active" on a source paused by a failed post-copy.
func (t *Tracker) openSource(in input) *job {
	key := jobKey{in.socket, in.dom.Name}
	if t.cfg.Trials != nil && t.cfg.Trials.Holds(key.socket, key.domain) {
		return nil
	}
	if d, ok := t.domains[in.socket][in.dom.Name]; ok {
		if _, pcf := postCopyFailedState(d.State, d.Reason); pcf {
			return nil
		}
	}
	if t.ledger.known(ledgerKey{in.socket, libvirtx.UUIDString(in.dom.UUID), api.RoleSource}) {
		return nil // the failed post-copy's job, which libvirt keeps active
	}
	start := in.got.Add(-time.Duration(in.stats.TimeElapsedMs) * time.Millisecond)
	if last := t.latest[key]; last != nil && last.view.Role == api.RoleSource {
		if last.view.EndTime != nil && in.at.Before(*last.view.EndTime) {
			return nil
		}
		if last.byDriver && last.view.EndTime != nil && start.Before(*last.view.EndTime) {
			// libvirt's job of the migration the driver ended, its
			// Confirm still running: the same migration, not a new one.
			return nil
		}
		if d := start.Sub(last.libvirtStart); !last.libvirtStart.IsZero() && d < sameJobSlack && d > -sameJobSlack {
			return nil
		}
	}
	j := t.newJob(in.socket, in.dom, api.RoleSource, start, "outgoing migration job in libvirt")
	j.libvirtStart = start
	return j
}

// recordPostCopyFailed records a domain found in a state only a failed
// post-copy leaves, with no job in flight (found after a restart of ferryd
// or libvirtd, or told by an event after the job ended): once per failure,
// across restarts of ferryd.
func (t *Tracker) recordPostCopyFailed(socket string, dom libvirt.Domain, role api.Role, st libvirtx.State, reason int32, at time.Time, how string) {
	key := jobKey{socket, dom.Name}
	name := stateName(st, reason)
	lk := ledgerKey{socket, libvirtx.UUIDString(dom.UUID), role}
	if _, shown := t.ledger.shown[lk]; shown {
		if last := t.latest[key]; last != nil && last.view.DomainState != name {
			last.view.DomainState = name
			t.addEvent(last, at, "state", name+" ("+how+", already recorded)")
		}
		return
	}
	j := t.newJob(socket, dom, role, at, "domain "+name+" ("+how+")")
	j.view.Mode = api.ModePostCopy
	j.view.DomainState = name
	why := "post-copy failed (" + name + ")"
	if tr, ok := lookup(role, api.ModePostCopy, st, reason); ok && tr.why != "" {
		why = fmt.Sprintf(tr.why, name)
	}
	if rec, ok := t.ledger.recorded(lk); ok {
		// Counted when it happened, by the ferryd before this one; a counter
		// that counted it again would page again.
		j.recovered = true
		j.view.StartTime = rec.Detected
		why += fmt.Sprintf(" (recorded at %s, before ferryd restarted)", rec.Detected.UTC().Format(time.RFC3339))
	}
	t.finish(j, api.PhasePostCopyFailed, why, at)
}

// noteDomainState records the state an input implies, so the domain list
// (and the metrics read from it) show it before the next scan.
func (t *Tracker) noteDomainState(socket string, ref libvirt.Domain, st libvirtx.State, reason int32, at time.Time) {
	t.stateAt[jobKey{socket, ref.Name}] = at
	doms := t.domains[socket]
	if doms == nil {
		doms = map[string]libvirtx.Domain{}
		t.domains[socket] = doms
	}
	if st == libvirtx.StateShutoff || st == libvirtx.StateCrashed {
		delete(doms, ref.Name) // the listing holds active domains only
		return
	}
	doms[ref.Name] = libvirtx.Domain{Ref: ref, Name: ref.Name, UUID: libvirtx.UUIDString(ref.UUID), State: st, Reason: reason}
}

func withMsg(m string) string {
	if m == "" {
		return ""
	}
	return ": " + clip(m)
}
