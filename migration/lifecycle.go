package migration

import (
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
)

// onEvent applies one libvirt event. It never calls libvirt, so a slow or
// hung daemon cannot delay the next event; it returns the domain to sample
// right away when the event changes what the statistics would show.
func (t *Tracker) onEvent(ev libvirtx.Event) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := jobKey{ev.Socket, ev.Domain.Name}
	j := t.jobs[key]

	if ev.Kind == libvirtx.KindIteration {
		// Only the source of a migration sees iteration events.
		if j == nil {
			j = t.newJob(ev.Socket, ev.Domain, RoleSource, ev.Time, "migration-iteration event")
		}
		t.startIteration(j, uint64(ev.Iteration), ev.Time)
		t.addEvent(j, ev.Time, "libvirt", ev.String())
		t.publish(j)
		return ev.Domain.Name, true
	}

	name := libvirtx.EventName(ev.Event, ev.Detail)
	switch {
	case ev.Event == libvirtx.EventStarted && ev.Detail == libvirtx.StartedMigrated:
		if j == nil {
			j = t.newJob(ev.Socket, ev.Domain, RoleTarget, ev.Time, "incoming migration ("+name+")")
		}
	case ev.Event == libvirtx.EventSuspended && ev.Detail == libvirtx.SuspendedPostCopy:
		if j == nil {
			j = t.newJob(ev.Socket, ev.Domain, RoleSource, ev.Time, name)
		}
		t.setMode(j, ModePostCopy, ev, name)
	case ev.Event == libvirtx.EventResumed && ev.Detail == libvirtx.ResumedPostCopy:
		if j == nil {
			j = t.newJob(ev.Socket, ev.Domain, RoleTarget, ev.Time, name)
		}
		t.setMode(j, ModePostCopy, ev, name)
	case ev.Event == libvirtx.EventSuspended && ev.Detail == libvirtx.SuspendedPostCopyFailed:
		if j == nil {
			j = t.newJob(ev.Socket, ev.Domain, RoleSource, ev.Time, name)
		}
		t.addEvent(j, ev.Time, "libvirt", "lifecycle "+name)
		t.noteState(j, ev, libvirtx.StatePaused, libvirtx.PausedPostCopyFailed)
		t.finish(j, PhasePostCopyFailed, "post-copy failed: source paused (libvirt event "+name+"); the guest's memory is split across two hosts", ev.Time)
		return "", false
	case ev.Event == libvirtx.EventResumed && ev.Detail == libvirtx.ResumedPostCopyFailed:
		if j == nil {
			j = t.newJob(ev.Socket, ev.Domain, RoleTarget, ev.Time, name)
		}
		t.addEvent(j, ev.Time, "libvirt", "lifecycle "+name)
		t.noteState(j, ev, libvirtx.StateRunning, libvirtx.RunningPostCopyFailed)
		reason := "post-copy failed: target running without the pages left on the source (libvirt event " + name + ")"
		if j.view.Role == RoleSource {
			reason = "post-copy failed: the source resumed its own vCPUs (split brain, libvirt event " + name + ")"
		}
		t.finish(j, PhasePostCopyFailed, reason, ev.Time)
		return "", false
	}
	if j == nil {
		return "", false
	}
	t.addEvent(j, ev.Time, "libvirt", "lifecycle "+name)

	switch {
	case ev.Event == libvirtx.EventStopped && ev.Detail == libvirtx.StoppedMigrated && j.view.Role == RoleSource:
		t.finish(j, PhaseCompleted, "", ev.Time)
		return "", false
	case ev.Event == libvirtx.EventResumed && ev.Detail == libvirtx.ResumedMigrated && j.view.Role == RoleTarget:
		t.finish(j, PhaseCompleted, "", ev.Time)
		return ev.Domain.Name, true // read the final figures libvirt keeps
	case ev.Event == libvirtx.EventStopped && ev.Detail == libvirtx.StoppedFailed && j.view.Role == RoleTarget:
		t.finish(j, PhaseFailed, "incoming migration failed: the target domain was stopped (source aborted or the migration stream broke)", ev.Time)
		return "", false
	case ev.Event == libvirtx.EventStopped || ev.Event == libvirtx.EventCrashed:
		t.finish(j, PhaseFailed, fmt.Sprintf("domain %s during the migration", name), ev.Time)
		return "", false
	case ev.Event == libvirtx.EventSuspended && ev.Detail == libvirtx.SuspendedMigrated:
		// Pre-copy's final stop-and-copy, or a failed migration pausing the
		// guest: the next sample and state tell which.
	}
	t.publish(j)
	return ev.Domain.Name, true
}

func (t *Tracker) setMode(j *job, m Mode, ev libvirtx.Event, name string) {
	t.addEvent(j, ev.Time, "libvirt", "lifecycle "+name)
	if j.view.Mode != m {
		j.view.Mode = m
		if m == ModePostCopy {
			j.view.Convergence = VerdictUnknown
			j.view.ConvergenceReason = "post-copy: the target pulls the remaining pages on demand"
		}
	}
	j.view.UpdateTime = ev.Time
	t.publish(j)
}

// startIteration opens iteration n (and closes the previous one).
func (t *Tracker) startIteration(j *job, n uint64, tm time.Time) {
	if k := len(j.iters); k > 0 {
		last := &j.iters[k-1]
		if last.Number >= n {
			return
		}
		if last.End == nil {
			last.End = &tm
		}
	}
	j.iters = append(j.iters, Iteration{Number: n, Start: tm})
	if len(j.iters) > t.cfg.MaxIterations {
		j.iters = append(j.iters[:0], j.iters[len(j.iters)-t.cfg.MaxIterations:]...)
	}
	if n > j.view.Iteration {
		j.view.Iteration = n
	}
}

// noteState records the state an event implies, so the domain list (and the
// metrics read from it) show it before the next scan; the caller holds t.mu.
func (t *Tracker) noteState(j *job, ev libvirtx.Event, st libvirtx.State, reason int32) {
	j.view.DomainState = st.String() + "/" + libvirtx.ReasonName(st, reason)
	doms := t.domains[ev.Socket]
	if doms == nil {
		doms = map[string]libvirtx.Domain{}
		t.domains[ev.Socket] = doms
	}
	d := doms[ev.Domain.Name]
	d.Ref, d.Name, d.UUID, d.State, d.Reason = ev.Domain, ev.Domain.Name, libvirtx.UUIDString(ev.Domain.UUID), st, reason
	doms[ev.Domain.Name] = d
}
