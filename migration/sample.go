package migration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// sampler makes the libvirt reads of one connection and hands every result
// to Tracker.apply; it never changes the tracker's record itself.
type sampler struct {
	t    *Tracker
	c    *libvirtx.Conn
	kick chan action
	pace *pace
}

// loop scans the connection on every tick and makes the reads that inputs
// ask for. The first scan also picks up jobs that were already running, or
// had already failed, before this connection existed.
func (s *sampler) loop(ctx context.Context) {
	s.scan(ctx)
	interval := s.t.cfg.SampleInterval
	due := time.Now().Add(interval)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			s.t.forgetSocket(s.c.Socket())
			return
		case now := <-timer.C:
			switch whole, jobs := s.pace.next(now, s.t.busy(s.c.Socket())); {
			case whole:
				s.scan(ctx)
			case jobs:
				s.sampleAll(ctx, s.t.held(s.c.Socket()))
			}
			// A busy socket is read on an even beat, however long the
			// reads took, as a ticker would.
			due = now.Add(s.pace.wait(time.Now(), s.t.busy(s.c.Socket())))
			timer.Reset(max(time.Until(due), 0))
		case a := <-s.kick:
			s.do(ctx, a)
			// An event woke a socket asleep until its next idle read:
			// from now it is read every interval.
			if now := time.Now(); s.pace.awake(now) && due.After(now.Add(interval)) {
				due = now.Add(interval)
				timer.Reset(interval)
			}
		}
	}
}

// follow queues the reads apply asked for; a full queue drops them: the
// next whole scan makes every read again (every tick while the socket is
// busy or awake, which the events that ask for most of them keep it).
func (s *sampler) follow(ctx context.Context, acts []action) {
	for _, a := range acts {
		if a.what == settleLater {
			a.what = settle
			// Dropped when the queue is full: every listing settles a
			// job vanished past the grace again.
			time.AfterFunc(vanishGrace, func() {
				select {
				case s.kick <- a:
				default:
				}
			})
			continue
		}
		select {
		case s.kick <- a:
		default:
		}
	}
}

func (s *sampler) do(ctx context.Context, a action) {
	switch a.what {
	case sample:
		s.follow(ctx, s.sample(ctx, a.dom))
	case settle:
		s.settle(ctx, a.dom)
	case askQEMU:
		at := time.Now()
		qctx, cancel := context.WithTimeout(ctx, qemuAskTimeout)
		st, err := s.c.QEMUMigrationStatus(qctx, a.dom)
		cancel()
		s.t.apply(input{kind: inQEMUStatus, socket: s.c.Socket(), dom: a.dom, at: at, got: time.Now(), qemu: st, err: err})
	}
}

func (t *Tracker) forgetSocket(socket string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.domains, socket)
	for k := range t.stateAt {
		if k.socket == socket {
			delete(t.stateAt, k)
		}
	}
}

// scan lists domains in one call, then reads job stats of each active
// domain concurrently, so one domain stuck on libvirt's state-change lock
// delays nobody else.
func (s *sampler) scan(ctx context.Context) {
	at := time.Now()
	doms, err := s.c.Domains(ctx)
	if errors.Is(err, libvirtx.ErrNotALauncher) {
		// Cut: no more of its events are taken, and the pool holds the
		// socket off, saying why in its status.
		s.t.log.Warn("a socket the glob matched lists what no KubeVirt launcher runs; dropping it", zap.Error(err))
		s.c.Close()
		return
	}
	if err != nil {
		s.t.log.Debug("listing domains failed", zap.Error(err))
		return
	}
	acts := s.t.apply(input{kind: inList, socket: s.c.Socket(), at: at, got: time.Now(), list: doms})
	s.readFinals(ctx)
	var refs []libvirt.Domain
	for _, a := range acts {
		if a.what != sample {
			s.follow(ctx, []action{a})
			continue
		}
		refs = append(refs, a.dom)
	}
	s.sampleAll(ctx, refs)
}

// sampleAll reads the job stats of each domain concurrently; a launcher's
// one is read on the sampler's own goroutine.
func (s *sampler) sampleAll(ctx context.Context, refs []libvirt.Domain) {
	if len(refs) == 1 {
		s.follow(ctx, s.sample(ctx, refs[0]))
		return
	}
	var wg sync.WaitGroup
	for _, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.follow(ctx, s.sample(ctx, ref))
		}()
	}
	wg.Wait()
}

// sample reads one domain's active job statistics and applies them.
func (s *sampler) sample(ctx context.Context, ref libvirt.Domain) []action {
	t, c := s.t, s.c
	at := time.Now()
	stats, err := c.JobStats(ctx, ref, false)
	got := time.Now()
	active := err == nil && stats.Type.Active() && stats.Operation == libvirtx.OperationMigrationOut
	if active && t.needsMaxDowntime(c.Socket(), ref.Name) {
		asked := time.Now()
		if md, merr := c.MaxDowntime(ctx, ref); merr == nil {
			defer t.setMaxDowntime(c.Socket(), ref.Name, md, asked)
		}
	}
	var cpu *libvirtx.QEMUCPU
	if active && t.cfg.CPU != nil {
		if r, cerr := t.cfg.CPU.ReadCPU(c.Socket(), ref.Name); cerr == nil {
			cpu = &r
		} else {
			defer t.noteCPUError(c.Socket(), ref.Name, cerr)
		}
	}
	return t.apply(input{kind: inStats, socket: c.Socket(), dom: ref, at: at, got: got, stats: stats, err: err, cpu: cpu})
}

// settle reads how a domain's libvirt job ended: its completed-job
// statistics (kept for other readers) and its state. A job still active
// (a listing that raced its start) is applied as a reading instead.
func (s *sampler) settle(ctx context.Context, ref libvirt.Domain) {
	t, c := s.t, s.c
	at := time.Now()
	if st, err := c.JobStats(ctx, ref, false); migrating(st, err) {
		s.follow(ctx, t.apply(input{kind: inStats, socket: c.Socket(), dom: ref, at: at, got: time.Now(), stats: st, err: err}))
		return
	}
	done, derr := c.JobStats(ctx, ref, true)
	state, reason, serr := c.DomainState(ctx, ref)
	t.apply(input{kind: inEnded, socket: c.Socket(), dom: ref, at: at, got: time.Now(),
		stats: done, err: derr, state: state, reason: reason, serr: serr})
}

// migrating reports a reading of an active migration job; another kind of
// job (a dump, a backup) is not the migration still going on.
func migrating(s libvirtx.JobStats, err error) bool {
	if err != nil {
		return libvirtx.IsTargetOnly(err)
	}
	return s.Type.Active() && (s.Operation == libvirtx.OperationMigrationOut || s.Operation == libvirtx.OperationMigrationIn)
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
		j.view.QEMU = &api.QEMUFigures{Error: err.Error()}
	}
	t.addEvent(j, time.Now(), "qemu-cgroup", err.Error())
}

// needsMaxDowntime: read once per iteration, since whoever drives the
// migration may raise it (KubeVirt does, past its completion timeout).
func (t *Tracker) needsMaxDowntime(socket, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[jobKey{socket, name}]
	return j == nil || j.maxDowntime == 0 || j.maxDowntimeIter != j.view.Iteration
}

func (t *Tracker) setMaxDowntime(socket, name string, d time.Duration, asked time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.jobs[jobKey{socket, name}]; j != nil && d > 0 && !asked.Before(j.maxDowntimeSetAt) {
		if j.maxDowntime != 0 && j.maxDowntime != d {
			t.addEvent(j, time.Now(), "libvirt", fmt.Sprintf("max downtime now %v (was %v)", d, j.maxDowntime))
		}
		j.maxDowntime, j.maxDowntimeIter = d, j.view.Iteration
		j.view.MaxDowntimeMs = uint64(d / time.Millisecond)
	}
}

// readFinals reads the completed-job statistics of completed target jobs.
func (s *sampler) readFinals(ctx context.Context) {
	s.t.mu.Lock()
	var todo []libvirt.Domain
	for k, j := range s.t.finals {
		if k.socket == s.c.Socket() {
			todo = append(todo, j.ref)
		}
	}
	s.t.mu.Unlock()
	for _, ref := range todo {
		at := time.Now()
		st, err := s.c.JobStats(ctx, ref, true)
		s.t.apply(input{kind: inFinal, socket: s.c.Socket(), dom: ref, at: at, got: time.Now(), stats: st, err: err})
	}
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
		// Capped below 100 until libvirt says it is done, and never lower
		// than before, as VDSM does: remaining grows again when a pass
		// starts over the pages the guest dirtied meanwhile.
		v.ProgressPercent = max(v.ProgressPercent, min(99, 100-100*float64(s.DataRemaining)/float64(s.DataTotal)))
	}
	v.UpdateTime = now
	if cpu != nil {
		v.QEMU = t.cpuFigures(j, *cpu)
	}
	sample := api.Sample{Time: now, ElapsedMs: s.TimeElapsedMs, Iteration: s.MemoryIteration,
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
		if it.Number == s.MemoryIteration && max(it.largest, s.MemoryRemaining) > 0 {
			it.largest = max(it.largest, s.MemoryRemaining)
			v.PassBytes = it.largest
			v.PassPercent = 100 * float64(it.largest-s.MemoryRemaining) / float64(it.largest)
		}
	}
	if v.Mode == api.ModePostCopy {
		if s.MemoryBps > 0 {
			v.EtaSeconds = eta(float64(s.MemoryRemaining) / float64(s.MemoryBps))
		}
	} else {
		md := j.maxDowntime
		if md == 0 {
			md = DefaultMaxDowntime
		}
		a := Assess(j.iters, Figures{RemainingBytes: s.MemoryRemaining, MemoryTotalBytes: s.MemoryTotal,
			TransferBps: s.MemoryBps, DirtyBps: s.MemoryDirtyRate, MaxDowntime: md,
			ExpectedDowntime: time.Duration(s.DowntimeMs) * time.Millisecond})
		if a.Verdict != v.Convergence {
			t.addEvent(j, now, "convergence", string(a.Verdict)+": "+a.Reason)
		}
		v.Convergence, v.ConvergenceReason, v.EtaSeconds = a.Verdict, a.Reason, a.ETA
	}
	t.publish(j)
}

// cpuFigures turns cumulative cgroup counters into figures over the job.
func (t *Tracker) cpuFigures(j *job, r libvirtx.QEMUCPU) *api.QEMUFigures {
	if j.cpuFirst == nil || j.cpuFirst.PID != r.PID {
		first := r
		first.Throttling = slices.Clone(r.Throttling)
		j.cpuFirst, j.cpuPrev = &first, nil
	}
	// A group first read during the job (one left out of an earlier
	// reading) counts from that reading, not from QEMU's start.
	for _, n := range r.Throttling {
		if !slices.ContainsFunc(j.cpuFirst.Throttling, func(f libvirtx.CgroupThrottling) bool { return f.Cgroup == n.Cgroup }) {
			j.cpuFirst.Throttling = append(j.cpuFirst.Throttling, n)
		}
	}
	f := &api.QEMUFigures{PID: r.PID, CgroupPath: r.Cgroup,
		CPUUsageSeconds: r.UsageSeconds - j.cpuFirst.UsageSeconds}
	if th, pct := mostThrottled(j.cpuFirst.Throttling, r.Throttling); th.Periods > 0 {
		f.ThrottledCgroup, f.ThrottledPeriods, f.ThrottledSeconds, f.ThrottledPercentPeriods =
			th.Cgroup, th.ThrottledPeriods, th.ThrottledSeconds, pct
	}
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
	j.cpuPrev = &r
	return f
}

// mostThrottled is, over the job, the group whose quota held QEMU back in
// the largest share of its periods, with that share. Each group counts
// periods only while it has a quota and runs, so shares of different
// groups are not added: an emulator group throttled in 9 of 10 periods is
// starved whether or not the domain's group, without a quota, was.
func mostThrottled(first, now []libvirtx.CgroupThrottling) (libvirtx.CgroupThrottling, float64) {
	var best libvirtx.CgroupThrottling
	bestPct := -1.0
	for _, n := range now {
		d := n
		for _, f := range first {
			if f.Cgroup == n.Cgroup && f.Periods <= n.Periods && f.ThrottledPeriods <= n.ThrottledPeriods {
				d.Periods, d.ThrottledPeriods = n.Periods-f.Periods, n.ThrottledPeriods-f.ThrottledPeriods
				d.ThrottledSeconds = n.ThrottledSeconds - f.ThrottledSeconds
			}
		}
		if d.Periods == 0 {
			continue
		}
		pct := 100 * float64(d.ThrottledPeriods) / float64(d.Periods)
		enough, bestEnough := d.Periods >= minSharePeriods, best.Periods >= minSharePeriods
		if enough != bestEnough {
			if enough {
				best, bestPct = d, pct
			}
			continue
		}
		if pct > bestPct || pct == bestPct && d.ThrottledPeriods > best.ThrottledPeriods {
			best, bestPct = d, pct
		}
	}
	return best, max(bestPct, 0)
}

// minSharePeriods: a group that ran in fewer CFS periods than this during
// the job (a second at the default 100 ms period) is chosen only if no
// group ran longer, so two throttled periods of an idle emulator group do
// not outrank a vCPU throttled in most of a thousand.
const minSharePeriods = 10
