package migration

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
)

// sampleLoop scans the connection on every tick and samples single domains
// when an event asks for it. The first scan also picks up jobs that were
// already running, or had already failed, before this connection existed.
func (t *Tracker) sampleLoop(ctx context.Context, c *libvirtx.Conn, kick <-chan string) {
	t.scan(ctx, c)
	tick := time.NewTicker(t.cfg.SampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.forgetSocket(c.Socket())
			return
		case <-tick.C:
			t.scan(ctx, c)
		case name := <-kick:
			t.sampleNamed(ctx, c, name)
		}
	}
}

func (t *Tracker) forgetSocket(socket string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.domains, socket)
}

// scan lists domains in one call, then reads job stats of each active
// domain concurrently, so one domain stuck on libvirt's state-change lock
// delays nobody else.
func (t *Tracker) scan(ctx context.Context, c *libvirtx.Conn) {
	doms, err := c.Domains(ctx)
	if err != nil {
		t.log.Debug("listing domains failed", zap.Error(err))
		return
	}
	probe := t.updateDomains(c.Socket(), doms, time.Now())
	t.readFinals(ctx, c)
	var wg sync.WaitGroup
	for _, d := range probe {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.sampleDomain(ctx, c, d)
		}()
	}
	wg.Wait()
}

func (t *Tracker) sampleNamed(ctx context.Context, c *libvirtx.Conn, name string) {
	t.readFinals(ctx, c)
	t.mu.Lock()
	d, ok := t.domains[c.Socket()][name]
	j := t.jobs[jobKey{c.Socket(), name}]
	t.mu.Unlock()
	if !ok {
		if j == nil {
			return
		}
		d = libvirtx.Domain{Ref: j.ref, Name: name, State: libvirtx.StateRunning}
	}
	if j != nil && j.view.Role == RoleTarget {
		return
	}
	t.sampleDomain(ctx, c, d)
}

// sampleDomain reads one domain's job stats and applies them.
func (t *Tracker) sampleDomain(ctx context.Context, c *libvirtx.Conn, d libvirtx.Domain) {
	stats, err := c.JobStats(ctx, d.Ref, false)
	if err == nil && stats.Type.Active() && stats.Operation == libvirtx.OperationMigrationOut && t.needsMaxDowntime(c.Socket(), d.Name) {
		if md, merr := c.MaxDowntime(ctx, d.Ref); merr == nil {
			t.setMaxDowntime(c.Socket(), d.Name, md)
		}
	}
	now := time.Now()
	var cpu *libvirtx.QEMUCPU
	var cpuErr error
	if err == nil && stats.Type.Active() && t.cfg.CPU != nil {
		r, cerr := t.cfg.CPU.ReadCPU(d.Name)
		if cerr == nil {
			cpu = &r
		}
		cpuErr = cerr
	}
	if cpuErr != nil {
		t.noteCPUError(c.Socket(), d.Name, cpuErr)
	}
	if t.onStats(c.Socket(), d, stats, err, cpu, now) {
		// The job is gone from libvirt while we still track it running:
		// libvirt's completed-job statistics say how it ended.
		done, derr := c.JobStats(ctx, d.Ref, true)
		state, reason, serr := c.DomainState(ctx, d.Ref)
		t.onEnded(c.Socket(), d, done, derr, state, reason, serr, time.Now())
	}
}

// noteCPUError shows why a job has no QEMU figures, once per distinct error.
func (t *Tracker) noteCPUError(socket, name string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[jobKey{socket, name}]
	if j == nil || (j.view.QEMU != nil && j.view.QEMU.Error == err.Error()) {
		return
	}
	if j.view.QEMU == nil || j.view.QEMU.PID == 0 {
		j.view.QEMU = &QEMUFigures{Error: err.Error()}
	}
	t.addEvent(j, time.Now(), "qemu-cgroup", err.Error())
}

func (t *Tracker) needsMaxDowntime(socket, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[jobKey{socket, name}]
	return j == nil || j.maxDowntime == 0
}

func (t *Tracker) setMaxDowntime(socket, name string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.jobs[jobKey{socket, name}]; j != nil && d > 0 {
		j.maxDowntime = d
	}
}

// readFinals fills completed target jobs with the statistics libvirt keeps
// on the target after a pre-copy migration: the only figures that side has.
func (t *Tracker) readFinals(ctx context.Context, c *libvirtx.Conn) {
	t.mu.Lock()
	var todo []*job
	for k, j := range t.finals {
		if k.socket == c.Socket() {
			todo = append(todo, j)
		}
	}
	t.mu.Unlock()
	for _, j := range todo {
		s, err := c.JobStats(ctx, j.ref, true)
		t.mu.Lock()
		key := jobKey{j.view.Socket, j.view.Domain}
		j.finalTries++
		switch {
		case err == nil && s.Type == libvirtx.JobCompleted:
			v := &j.view
			v.DataTotalBytes, v.DataProcessedBytes, v.DataRemainingBytes = s.DataTotal, s.DataProcessed, s.DataRemaining
			v.MemoryTotalBytes, v.MemoryRemainingBytes = s.MemoryTotal, s.MemoryRemaining
			v.TransferRateBytesPerSecond, v.DirtyRateBytesPerSecond = s.MemoryBps, s.MemoryDirtyRate
			v.Iteration, v.PostCopyRequests = s.MemoryIteration, s.MemoryPostCopyReqs
			v.DowntimeMs, v.ElapsedMs = s.DowntimeMs, s.TimeElapsedMs
			t.addEvent(j, time.Now(), "libvirt", "completed-job statistics read")
			t.publish(j)
			delete(t.finals, key)
		case j.finalTries >= finalTries:
			// libvirt keeps none after post-copy; nothing more to learn.
			detail := "libvirt kept no completed-job statistics"
			if err != nil {
				detail += ": " + err.Error()
			}
			t.addEvent(j, time.Now(), "libvirt", detail)
			delete(t.finals, key)
		}
		t.mu.Unlock()
	}
}

// finalTries bounds how many scans look for a target's completed-job
// statistics: libvirt stores them only once the domain has fully resumed.
const finalTries = 5

// updateDomains stores the listing, settles jobs whose outcome the domain
// states already show, and returns the domains worth reading job stats of.
func (t *Tracker) updateDomains(socket string, doms []libvirtx.Domain, now time.Time) []libvirtx.Domain {
	t.mu.Lock()
	defer t.mu.Unlock()
	byName := make(map[string]libvirtx.Domain, len(doms))
	for _, d := range doms {
		byName[d.Name] = d
	}
	t.domains[socket] = byName

	for k, j := range t.jobs {
		if k.socket != socket {
			continue
		}
		d, present := byName[k.domain]
		if !present {
			if j.view.Role == RoleSource {
				t.finish(j, PhaseCompleted, "", now)
			} else {
				t.finish(j, PhaseFailed, "incoming migration failed: the domain is gone from the target", now)
			}
			continue
		}
		t.applyState(j, d, now)
	}
	for _, d := range doms {
		if t.jobs[jobKey{socket, d.Name}] != nil {
			continue
		}
		if j := t.lastFinished(socket, d.Name); j != nil {
			st := d.State.String() + "/" + libvirtx.ReasonName(d.State, d.Reason)
			if j.view.DomainState != st {
				j.view.DomainState = st
				t.addEvent(j, now, "state", st+" (after the job ended)")
			}
		}
	}

	var probe []libvirtx.Domain
	for _, d := range doms {
		j := t.jobs[jobKey{socket, d.Name}]
		switch {
		case j != nil && j.view.Role == RoleTarget:
			// libvirt refuses job stats on the target; its state says it all.
		case j == nil && t.recoverFromState(socket, d, now):
		default:
			probe = append(probe, d)
		}
	}
	return probe
}

// applyState reads a job's outcome from its domain's state and reason.
func (t *Tracker) applyState(j *job, d libvirtx.Domain, now time.Time) {
	st := d.State.String() + "/" + libvirtx.ReasonName(d.State, d.Reason)
	if j.view.DomainState != st {
		j.view.DomainState = st
		t.addEvent(j, now, "state", st)
		t.publish(j)
	}
	switch j.view.Role {
	case RoleSource:
		switch {
		case d.State == libvirtx.StatePaused && d.Reason == libvirtx.PausedPostCopyFailed:
			t.finish(j, PhasePostCopyFailed, "post-copy failed: source paused ("+st+"); the guest's memory is split across two hosts", now)
		case d.State == libvirtx.StateRunning && d.Reason == libvirtx.RunningPostCopy:
			// Normal post-copy keeps the source paused; running here means
			// the source QEMU resumed its vCPUs after post-copy failed.
			t.finish(j, PhasePostCopyFailed, "post-copy failed: the source resumed its own vCPUs ("+st+"), split brain with the target", now)
		case d.State == libvirtx.StatePaused && d.Reason == libvirtx.PausedPostCopy && j.view.Mode != ModePostCopy:
			j.view.Mode = ModePostCopy
			t.publish(j)
		case d.State == libvirtx.StatePaused && d.Reason == libvirtx.PausedUser && j.view.Mode == ModePreCopy:
			// A guest paused by a client mid pre-copy migrates as a paused
			// guest: nothing dirties memory any more, so it will converge.
			j.view.Mode = ModePaused
			t.addEvent(j, now, "mode", "guest paused by a client: migrating a paused guest")
			t.publish(j)
		case d.State == libvirtx.StateRunning && j.view.Mode == ModePaused:
			j.view.Mode = ModePreCopy
			t.addEvent(j, now, "mode", "guest resumed: back to pre-copy")
			t.publish(j)
		}
	case RoleTarget:
		switch {
		case d.State == libvirtx.StateRunning && d.Reason == libvirtx.RunningPostCopyFailed:
			t.finish(j, PhasePostCopyFailed, "post-copy failed: target running without the pages left on the source ("+st+")", now)
		case d.State == libvirtx.StateRunning && d.Reason == libvirtx.RunningMigrated:
			t.finish(j, PhaseCompleted, "", now)
		case d.State == libvirtx.StateRunning && d.Reason == libvirtx.RunningPostCopy && j.view.Mode != ModePostCopy:
			j.view.Mode = ModePostCopy
			t.publish(j)
		}
	}
}

// recoverFromState opens a job for a domain whose state alone shows a
// migration outcome Ferry has not recorded yet (after a restart of ferryd or
// of libvirtd). It reports whether the domain needs no job stats probe.
func (t *Tracker) recoverFromState(socket string, d libvirtx.Domain, now time.Time) bool {
	var role Role
	var reason string
	switch {
	case d.State == libvirtx.StatePaused && d.Reason == libvirtx.PausedPostCopyFailed:
		role, reason = RoleSource, "post-copy failed: source paused (found paused/post-copy-failed); the guest's memory is split across two hosts"
	case d.State == libvirtx.StateRunning && d.Reason == libvirtx.RunningPostCopyFailed:
		role, reason = RoleTarget, "post-copy failed: target running without the pages left on the source (found running/post-copy-failed)"
	default:
		return false
	}
	if last := t.lastFinished(socket, d.Name); last != nil && last.view.Phase == PhasePostCopyFailed {
		return true // already recorded; the domain simply stays in that state
	}
	j := t.newJob(socket, d.Ref, role, now, "domain found in a post-copy-failed state")
	j.view.Mode = ModePostCopy
	j.view.DomainState = d.State.String() + "/" + libvirtx.ReasonName(d.State, d.Reason)
	t.finish(j, PhasePostCopyFailed, reason, now)
	return true
}

// onStats applies a job stats reading. It reports whether the tracked job
// has ended in libvirt and its outcome must be read.
func (t *Tracker) onStats(socket string, d libvirtx.Domain, s libvirtx.JobStats, err error, cpu *libvirtx.QEMUCPU, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := jobKey{socket, d.Name}
	j := t.jobs[key]
	switch {
	case err != nil && libvirtx.IsTargetOnly(err):
		if last := t.lastFinished(socket, d.Name); j == nil && last != nil && last.view.Role == RoleTarget &&
			last.view.EndTime != nil && now.Sub(*last.view.EndTime) < 10*time.Second {
			// libvirt still calls the incoming job active for a moment
			// after its completion event: the same migration, not a new one.
			return false
		}
		if j == nil {
			j = t.newJob(socket, d.Ref, RoleTarget, now, "incoming migration (libvirt: statistics only on the source)")
			t.applyState(j, d, now)
			t.publish(j)
		}
		return false
	case err != nil:
		if j != nil && j.lastError != err.Error() && !libvirtx.IsNoDomain(err) {
			j.lastError = err.Error()
			t.addEvent(j, now, "sample-error", err.Error())
			t.publish(j)
		}
		return false
	case s.Type.Active() && s.Operation == libvirtx.OperationMigrationIn:
		if j == nil {
			t.newJob(socket, d.Ref, RoleTarget, now, "incoming migration job")
		}
		return false
	case s.Type.Active() && s.Operation == libvirtx.OperationMigrationOut:
		if j == nil {
			start := now.Add(-time.Duration(s.TimeElapsedMs) * time.Millisecond)
			j = t.newJob(socket, d.Ref, RoleSource, start, "outgoing migration job in libvirt")
			t.applyState(j, d, now)
		}
		t.applySample(j, s, cpu, now)
		return false
	case j != nil && j.view.Role == RoleSource && !s.Type.Active():
		return true
	}
	return false
}

// onEnded settles a source job whose libvirt job is gone.
func (t *Tracker) onEnded(socket string, d libvirtx.Domain, done libvirtx.JobStats, derr error, state libvirtx.State, reason int32, serr error, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[jobKey{socket, d.Name}]
	if j == nil {
		return
	}
	if serr != nil {
		if libvirtx.IsNoDomain(serr) {
			t.finish(j, PhaseCompleted, "", now)
		}
		return
	}
	dom := libvirtx.Domain{Ref: d.Ref, Name: d.Name, State: state, Reason: reason}
	t.applyState(j, dom, now)
	if j.view.Phase.Finished() {
		return
	}
	pausedNote := ""
	if state == libvirtx.StatePaused {
		pausedNote = "; the guest was left paused on the source (" + libvirtx.ReasonName(state, reason) + ")"
	}
	if derr == nil && done.Operation == libvirtx.OperationMigrationOut {
		j.view.DowntimeMs = done.DowntimeMs
		switch done.Type {
		case libvirtx.JobCancelled:
			t.finish(j, PhaseAborted, "migration canceled"+withMsg(done.ErrMsg)+pausedNote, now)
			return
		case libvirtx.JobFailed:
			t.finish(j, PhaseFailed, "migration failed"+withMsg(done.ErrMsg)+pausedNote, now)
			return
		case libvirtx.JobCompleted:
			if state == libvirtx.StateShutoff {
				t.finish(j, PhaseCompleted, "", now)
				return
			}
		}
	}
	if state == libvirtx.StateShutoff {
		t.finish(j, PhaseCompleted, "", now)
		return
	}
	t.finish(j, PhaseFailed, "migration job ended without completing; libvirt kept no statistics of why"+pausedNote, now)
}

func withMsg(m string) string {
	if m == "" {
		return ""
	}
	return ": " + m
}

// applySample folds one stats reading into the job; the caller holds t.mu.
func (t *Tracker) applySample(j *job, s libvirtx.JobStats, cpu *libvirtx.QEMUCPU, now time.Time) {
	v := &j.view
	if s.MemoryTotal == 0 && s.DataTotal == 0 {
		// The reading taken at the instant of the switch-over carries no
		// figures; keeping it would zero the job's last real ones.
		return
	}
	if s.MemoryIteration > v.Iteration || (len(j.iters) == 0 && s.MemoryIteration > 0) {
		// An iteration event was missed (or came before Ferry connected).
		t.startIteration(j, s.MemoryIteration, now)
	}
	if s.TimeElapsedMs > 0 {
		// A job found from an event starts when the event arrived; libvirt's
		// elapsed time dates it from libvirt's own start, which is what a
		// ferryd that finds the job later (after a restart) also sees.
		if libStart := now.Add(-time.Duration(s.TimeElapsedMs) * time.Millisecond); libStart.Before(v.StartTime) {
			v.StartTime = libStart
		}
	}
	v.ElapsedMs = s.TimeElapsedMs
	v.DataTotalBytes, v.DataProcessedBytes, v.DataRemainingBytes = s.DataTotal, s.DataProcessed, s.DataRemaining
	v.MemoryTotalBytes, v.MemoryRemainingBytes = s.MemoryTotal, s.MemoryRemaining
	v.TransferRateBytesPerSecond = s.MemoryBps
	v.DirtyRateBytesPerSecond = s.MemoryDirtyRate
	v.PostCopyRequests = s.MemoryPostCopyReqs
	v.AutoConvergeThrottle = s.AutoConvergeThrottle
	v.ExpectedDowntimeMs = s.DowntimeMs
	if s.DataTotal > 0 {
		// Capped below 100 until libvirt says it is done, as VDSM does:
		// remaining can grow again while the guest keeps dirtying pages.
		v.ProgressPercent = min(99, 100-100*float64(s.DataRemaining)/float64(s.DataTotal))
	}
	v.UpdateTime = now
	if cpu != nil {
		v.QEMU = t.cpuFigures(j, *cpu)
	}
	sample := Sample{Time: now, ElapsedMs: s.TimeElapsedMs, Iteration: s.MemoryIteration,
		DataProcessedBytes: s.DataProcessed, DataRemainingBytes: s.DataRemaining, MemoryRemainingBytes: s.MemoryRemaining,
		TransferRateBytesPerSecond: s.MemoryBps, DirtyRateBytesPerSecond: s.MemoryDirtyRate, PostCopyRequests: s.MemoryPostCopyReqs}
	if v.QEMU != nil {
		sample.QEMUCPUPercent = v.QEMU.CPUPercent
	}
	j.samples.push(sample)

	if n := len(j.iters); n > 0 && s.MemoryTotal > 0 {
		// A reading with no memory figures comes from the instant of the
		// switch-over; it says nothing about the iteration.
		it := &j.iters[n-1]
		if !it.sampled && it.Number == s.MemoryIteration {
			it.MemoryRemainingBytes = s.MemoryRemaining
			it.DirtyRateBytesPerSecond = s.MemoryDirtyRate
			it.TransferRateBytesPerSecond = s.MemoryBps
			it.sampled = true
		}
	}
	if v.Mode == ModePostCopy {
		if s.MemoryBps > 0 {
			v.EtaSeconds = eta(float64(s.MemoryRemaining) / float64(s.MemoryBps))
		}
	} else {
		md := j.maxDowntime
		if md == 0 {
			md = DefaultMaxDowntime
		}
		a := Assess(j.iters, Figures{RemainingBytes: s.MemoryRemaining, MemoryTotalBytes: s.MemoryTotal,
			TransferBps: s.MemoryBps, DirtyBps: s.MemoryDirtyRate, MaxDowntime: md})
		if a.Verdict != v.Convergence {
			t.addEvent(j, now, "convergence", string(a.Verdict)+": "+a.Reason)
		}
		v.Convergence, v.ConvergenceReason, v.EtaSeconds = a.Verdict, a.Reason, a.ETA
	}
	t.publish(j)
}

// cpuFigures turns cumulative cgroup counters into figures over the job.
func (t *Tracker) cpuFigures(j *job, r libvirtx.QEMUCPU) *QEMUFigures {
	if j.cpuFirst == nil || j.cpuFirst.PID != r.PID {
		j.cpuFirst, j.cpuPrev = &r, nil
	}
	f := &QEMUFigures{PID: r.PID, CgroupPath: r.Cgroup,
		CPUUsageSeconds:  r.UsageSeconds - j.cpuFirst.UsageSeconds,
		ThrottledPeriods: r.ThrottledPeriods - j.cpuFirst.ThrottledPeriods,
		ThrottledSeconds: r.ThrottledSeconds - j.cpuFirst.ThrottledSeconds}
	if j.view.QEMU != nil {
		f.CPUPercent = j.view.QEMU.CPUPercent
	}
	// Readings taken on iteration events can be milliseconds apart; a rate
	// over so short a window is noise, so the window is at least 500ms.
	if p := j.cpuPrev; p != nil {
		dt := r.Time.Sub(p.Time).Seconds()
		if dt < 0.5 {
			return f
		}
		f.CPUPercent = 100 * (r.UsageSeconds - p.UsageSeconds) / dt
	}
	if periods := r.Periods - j.cpuFirst.Periods; periods > 0 {
		f.ThrottledPercentPeriods = 100 * float64(f.ThrottledPeriods) / float64(periods)
	}
	j.cpuPrev = &r
	return f
}

// ApplyStats feeds one job stats reading for a domain exactly as the
// sampler does after reading it from libvirt. It lets benchmarks and
// replays drive the tracker without a libvirt daemon.
func (t *Tracker) ApplyStats(socket string, d libvirtx.Domain, s libvirtx.JobStats, at time.Time) {
	if t.onStats(socket, d, s, nil, nil, at) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if j := t.jobs[jobKey{socket, d.Name}]; j != nil {
			t.finish(j, PhaseCompleted, "", at)
		}
	}
}
