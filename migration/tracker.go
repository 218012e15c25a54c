package migration

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// CPUReader reads the QEMU process's cgroup CPU figures of a domain.
type CPUReader interface {
	ReadCPU(socket, domain string) (libvirtx.QEMUCPU, error)
}

// Config tunes the tracker; zero values take the defaults.
type Config struct {
	Node           string
	SampleInterval time.Duration // default 1s
	HistorySize    int           // finished jobs kept, default 256
	MaxSamples     int           // per job, default 900
	MaxIterations  int           // per job, default 512
	MaxEvents      int           // per job, default 256
	CPU            CPUReader
	Log            *zap.Logger
	// OnFinish is called, outside the tracker's lock, with each job that ends.
	OnFinish func(api.Job)
	// Trials says which domains a migration that moves nothing holds
	// (a dry run, one not yet performing): libvirt's job for one is no
	// migration, and no job is opened for it. nil: none are. Holds is
	// asked under the tracker's lock, so it must not call back into it.
	Trials interface {
		Holds(socket, domain string) bool
	}
	// Driver is where the driver keeps its account of the migrations it
	// drives and prepares, which the tracker shows; nil: it drives none.
	// It is read under the tracker's lock, so it must not call back into
	// it.
	Driver Driver
	// OnStart is called, outside the tracker's lock, with each job found.
	OnStart func(api.Job)
	// VerifyPostCopyFailure asks a source's QEMU (through libvirt's
	// monitor pass-through) before taking libvirt's word that its
	// post-copy failed: libvirt says so when the migration's API call
	// fails, even while QEMU's stream goes on and completes.
	VerifyPostCopyFailure bool
	// OnRecovery is called, outside the tracker's lock, with a job whose
	// post-copy recovery changed (paused, an attempt, resumed).
	OnRecovery func(j api.Job, what string)
	// OnRecovered is called, outside the tracker's lock, for a domain
	// whose post-copy was recorded failed and then completed.
	OnRecovered func(RecoveredDomain)
	// StateDir, when set, keeps the post-copy failures already recorded, so
	// a restarted ferryd neither counts nor reports them again.
	StateDir string
	// OnTimes is called, outside the tracker's lock, once for each ended
	// job whose own completed-job statistics libvirt gave.
	OnTimes func(EndedTimes)
}

func (c *Config) defaults() {
	if c.SampleInterval <= 0 {
		c.SampleInterval = time.Second
	}
	if c.HistorySize <= 0 {
		c.HistorySize = 256
	}
	if c.MaxSamples <= 0 {
		c.MaxSamples = 900
	}
	if c.MaxIterations <= 0 {
		c.MaxIterations = 512
	}
	if c.MaxEvents <= 0 {
		c.MaxEvents = 256
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
}

type jobKey struct{ socket, domain string }

// job is the tracker's record of one migration; view is what is published.
type job struct {
	view api.Job
	// recoveryOver: its post-copy recovery gave up, so a failure ends it.
	recoveryOver bool
	// unconfirmed is libvirt's word that its post-copy failed, while QEMU
	// is asked; qemuSaid once QEMU's own word has been taken.
	unconfirmed *unconfirmedFailure
	qemuSaid    bool
	// pauses counts its post-copy pauses: a pause's own timer acts only
	// while no later one has begun.
	pauses int
	// lastResumed is the recovery attempt Recovery.Resumed last counted.
	lastResumed int
	// failedInLibvirt: libvirt's completed job says it failed (not that
	// it was cancelled).
	failedInLibvirt bool
	// counted: the job is in the totals, as countedAs.
	counted   bool
	countedAs Total
	ref       libvirt.Domain
	samples   ring[api.Sample]
	iters     []iteration
	events    ring[api.Event]
	// domID is the libvirt domain ID (one per QEMU process) the job began
	// with: a target QEMU process receives one incoming migration only.
	domID int32
	// libvirtStart is libvirt's own start of an outgoing job, estimated
	// from its elapsed time: what tells a new libvirt job from this one.
	libvirtStart time.Time
	// byDriver: made on the driver's word alone, no reading of libvirt's
	// job having seen it; libvirt may still hold that job (its Confirm
	// running) when a reading first finds it.
	byDriver bool
	// opened is when the input that opened the job was true, and seen the
	// newest reading that found it active: readings asked earlier are stale.
	opened, seen time.Time
	// vanished is when the domain was first seen gone, zero while present.
	vanished time.Time
	// recovered: recorded by a previous ferryd; counted already.
	recovered bool
	// timed: its times went to Config.OnTimes.
	timed bool
	// maxDowntime is the migration's allowed downtime, read once per job.
	maxDowntime     time.Duration
	maxDowntimeIter uint64
	finalTries      int
	cpuFirst        *libvirtx.QEMUCPU
	cpuPrev         *libvirtx.QEMUCPU
	lastError       string
	// abortWhy is the policy's or the deadline's reason for an abort.
	abortWhy string
	// abortsAsked are the aborts let through whose outcome is not in yet,
	// and abortTaken says libvirt took one: while one is out, or once one
	// was taken, another's failure does not make the abort failed.
	abortsAsked int
	abortTaken  bool
	// countPending: finished, but counted only once its driver has given
	// its account, which may change its class.
	countPending bool
	// maxDowntimeSetAt is when Ferry last set the max downtime: a reading
	// asked for before it is older than the setting.
	maxDowntimeSetAt time.Time
}

// Tracker tracks the migration jobs of every libvirt connection on a node.
// It implements libvirtx.Handler.
type Tracker struct {
	cfg Config
	log *zap.Logger

	mu      sync.Mutex
	jobs    map[jobKey]*job
	history ring[*job]
	domains map[string]map[string]libvirtx.Domain // socket -> name
	totals  map[Total]uint64
	// recoveryAttempts counts attempts to resume a broken post-copy.
	recoveryAttempts map[string]uint64
	// asks are reads of QEMU's status, by socket, that apply returns
	// with its own to that socket's sampler.
	asks map[string][]action
	subs map[*subscriber]struct{}
	// finals are ended jobs whose completed-job statistics libvirt may
	// still hold (their times; a completed target's figures), to be read
	// once by the sampler.
	finals map[jobKey]*job
	// timed are ended jobs' times for Config.OnTimes, handed over once
	// apply lets go of t.mu.
	timed []EndedTimes
	// latest is each domain's newest finished job, still kept current with
	// the domain's state (a failed migration leaves it in a telling state).
	latest map[jobKey]*job
	// ledger keeps post-copy failures across restarts of ferryd.
	ledger *ledger
	// stateAt is when an event last told a domain's state, so an older
	// listing applied later does not put an older state back.
	stateAt map[jobKey]time.Time
	// lastID numbers jobs for their IDs.
	lastID uint64
}

// Total counts finished jobs by role and result.
type Total struct {
	Role   api.Role
	Result string
	// Plane and Class are a failure's, empty for other results.
	Plane api.FailurePlane
	Class api.FailureClass
}

// NewTracker returns an empty tracker.
func NewTracker(cfg Config) *Tracker {
	cfg.defaults()
	return &Tracker{
		cfg:     cfg,
		log:     cfg.Log,
		jobs:    map[jobKey]*job{},
		history: newRing[*job](cfg.HistorySize),
		domains: map[string]map[string]libvirtx.Domain{},
		totals:  map[Total]uint64{},

		recoveryAttempts: map[string]uint64{},
		subs:             map[*subscriber]struct{}{},
		finals:           map[jobKey]*job{},
		latest:           map[jobKey]*job{},
		ledger:           openLedger(cfg.StateDir, cfg.Log),
		stateAt:          map[jobKey]time.Time{},
	}
}

// Serve tracks one libvirt connection until its events end.
func (t *Tracker) Serve(ctx context.Context, c *libvirtx.Conn, events <-chan libvirtx.Event) {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{t: t, c: c, kick: make(chan action, 256), pace: newPace(t.cfg.SampleInterval, time.Now())}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.loop(ctx)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if c.Matched() && !t.admits(ev.Socket, ev.Domain.Name) {
				continue
			}
			s.pace.wake(time.Now())
			in := input{kind: inLifecycle, socket: ev.Socket, dom: ev.Domain, at: ev.Time, event: ev}
			if ev.Kind == libvirtx.KindIteration {
				in.kind = inIteration
			}
			s.follow(ctx, t.apply(in))
		}
	}
}

// admits says whether an event of a launcher's socket may be taken: one of
// a domain it listed, or of a new one while it holds fewer than a launcher
// runs. A pod serving a libvirt of its own where the launcher glob looks
// cannot make ferryd hold more of it than of a launcher.
func (t *Tracker) admits(socket, domain string) bool {
	if !libvirtx.LauncherName(domain) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	names := map[string]bool{}
	for name := range t.domains[socket] {
		names[name] = true
	}
	for k := range t.jobs {
		if k.socket == socket {
			names[k.domain] = true
		}
	}
	return names[domain] || len(names) < libvirtx.MaxLauncherDomains
}

// Lost records a lost libvirt connection on the jobs that depended on it:
// they stay in flight (libvirt keeps migrating without Ferry) and are picked
// up again when the connection is back. A socket that was removed
// (libvirtx.ErrSocketGone) will not come back: its jobs end as Lost.
func (t *Tracker) Lost(socket string, err error) {
	if errors.Is(err, libvirtx.ErrSocketGone) {
		t.apply(input{kind: inSocketGone, socket: socket, at: time.Now(), why: err.Error()})
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, j := range t.jobs {
		if k.socket == socket {
			j.vanished = time.Time{} // settled afresh once reconnected
			detail := "connection to libvirt lost"
			if err != nil {
				detail += ": " + err.Error()
			}
			t.addEvent(j, time.Now(), "libvirt", detail)
			t.publish(j)
		}
	}
}

// Jobs returns in-flight jobs, plus finished ones with all=true, newest first
// within each group. Samples, iterations and events are left out.
func (t *Tracker) Jobs(all bool) []api.Job {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]api.Job, 0, len(t.jobs))
	for _, j := range t.jobs {
		out = append(out, j.view)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].StartTime.After(out[b].StartTime) })
	if all {
		h := t.history.slice()
		for i := len(h) - 1; i >= 0; i-- {
			out = append(out, h[i].view)
		}
	}
	return out
}

// Job returns the newest job of a domain with its full evidence: the
// in-flight one if any, else the latest finished one.
func (t *Tracker) Job(domain string) (api.Job, bool) {
	j, err := t.JobByName("", domain)
	return j, err == nil
}

// JobByName is Job, on socket if one is named, but says why there is none:
// ErrNoJob, or ErrAmbiguous when no socket is named and more than one
// serves a domain of that name.
func (t *Tracker) JobByName(socket, domain string) (api.Job, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.unambiguous(socket, domain); err != nil {
		return api.Job{}, err
	}
	var best *job
	for k, j := range t.jobs {
		if k.domain == domain && onSocket(socket, k.socket) && (best == nil || j.view.StartTime.After(best.view.StartTime)) {
			best = j
		}
	}
	if best == nil {
		h := t.history.slice()
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].view.Domain == domain && onSocket(socket, h[i].view.Socket) {
				best = h[i]
				break
			}
		}
	}
	if best == nil {
		return api.Job{}, noJobError(fmt.Sprintf("no migration job for domain %q%s on node %s (in flight or in history)", domain, onWhich(socket), t.cfg.Node))
	}
	v := best.view
	v.Samples = best.samples.slice()
	v.Iterations = iterationsView(best.iters)
	v.Events = best.events.slice()
	return v, nil
}

// Domains lists every domain on every connected socket as last sampled.
func (t *Tracker) Domains() []api.Domain {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []api.Domain
	for socket, doms := range t.domains {
		for _, d := range doms {
			v := api.Domain{Name: d.Name, UUID: d.UUID, Socket: socket,
				State: d.State.String(), Reason: libvirtx.ReasonName(d.State, d.Reason), HoldsGuest: HoldsGuest(d.State, d.Reason)}
			v.Namespace, v.VMI, _ = vmiName(d.Name)
			if j := t.jobs[jobKey{socket, d.Name}]; j != nil {
				v.JobPhase, v.JobRole = j.view.Phase, j.view.Role
			} else if j := t.lastFinished(socket, d.Name); j != nil {
				v.JobPhase, v.JobRole = j.view.Phase, j.view.Role
			}
			v.AttentionReason, v.Attention = attention(d, t.jobs[jobKey{socket, d.Name}] != nil)
			if j := t.jobs[jobKey{socket, d.Name}]; j != nil && j.unconfirmed != nil && v.AttentionReason == "postcopy_failed" {
				// libvirt's word alone: QEMU is asked, or streams on.
				v.AttentionReason = "postcopy_unconfirmed"
				v.Attention = "libvirt reports post-copy failed; QEMU is asked whether its stream broke"
				if j.unconfirmed.alive != "" {
					v.Attention = "libvirt reports post-copy failed (the migration's API call failed), but QEMU's stream goes on (" + j.unconfirmed.alive + "); libvirt completes it by itself"
				}
			}
			if j := t.jobs[jobKey{socket, d.Name}]; j != nil && j.view.Phase == api.PhasePostCopyPaused && v.AttentionReason == "postcopy_failed" {
				// Not failed yet: Ferry is resuming it.
				v.AttentionReason = "postcopy_paused"
				v.Attention = "post-copy broke; QEMU holds it paused on both nodes while Ferry resumes it (until " + j.view.Recovery.Until.UTC().Format(time.RFC3339) + ")"
			}
			out = append(out, v)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// Count is the number of finished jobs of that role and result, whatever
// their failure class.
func (s Snapshot) Count(role api.Role, result string) uint64 {
	var n uint64
	for k, v := range s.Totals {
		if k.Role == role && k.Result == result {
			n += v
		}
	}
	return n
}

// Snapshot is what metrics are served from: copies, no libvirt calls.
type Snapshot struct {
	Jobs    []api.Job
	Domains []api.Domain
	Totals  map[Total]uint64
	// RecoveryAttempts counts attempts to resume a broken post-copy, by
	// result.
	RecoveryAttempts map[string]uint64
}

// Snapshot copies the in-flight jobs, the domains and the totals.
func (t *Tracker) Snapshot() Snapshot {
	doms := t.Domains()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Snapshot{Jobs: make([]api.Job, 0, len(t.jobs)), Domains: doms, Totals: make(map[Total]uint64, len(t.totals))}
	for _, j := range t.jobs {
		s.Jobs = append(s.Jobs, j.view)
	}
	for k, v := range t.totals {
		s.Totals[k] = v
	}
	s.RecoveryAttempts = map[string]uint64{RecoveryResumed: t.recoveryAttempts[RecoveryResumed], RecoveryFailed: t.recoveryAttempts[RecoveryFailed]}
	return s
}

func (t *Tracker) lastFinished(socket, domain string) *job {
	return t.latest[jobKey{socket, domain}]
}

// attention names what an operator must know about a domain's state: a
// short code for alert rules and the account for people.
func attention(d libvirtx.Domain, migrating bool) (string, string) {
	switch {
	case d.State == libvirtx.StatePaused && d.Reason == libvirtx.PausedPostCopyFailed:
		return "postcopy_failed", "post-copy failed: the guest's memory is split across two hosts; this paused copy cannot run"
	case d.State == libvirtx.StateRunning && d.Reason == libvirtx.RunningPostCopyFailed:
		return "postcopy_failed", "post-copy failed: this copy lacks pages still on the source and cannot run correctly"
	case d.State == libvirtx.StatePaused && d.Reason == libvirtx.PausedMigration && !migrating:
		return "paused_after_migration", "paused by a migration that is no longer running"
	}
	return "", ""
}

// newJob registers an in-flight job; the caller holds t.mu.
func (t *Tracker) newJob(socket string, ref libvirt.Domain, role api.Role, start time.Time, why string) *job {
	j := &job{
		ref:     ref,
		samples: newRing[api.Sample](t.cfg.MaxSamples),
		events:  newRing[api.Event](t.cfg.MaxEvents),
	}
	t.lastID++
	j.view = api.Job{
		ID:     fmt.Sprintf("%s-%d", t.cfg.Node, t.lastID),
		Domain: ref.Name, UUID: libvirtx.UUIDString(ref.UUID), Node: t.cfg.Node, Socket: socket,
		Role: role, Phase: api.PhaseRunning, Mode: api.ModePreCopy, Convergence: api.VerdictUnknown,
		StartTime: start, UpdateTime: time.Now(),
	}
	j.view.Namespace, j.view.Name, _ = vmiName(ref.Name)
	j.domID, j.opened, j.seen = ref.ID, start, start
	key := jobKey{socket, ref.Name}
	if d, ok := t.driving(key); ok && role == api.RoleSource {
		j.setProxy(d.Proxy)
	}
	if p, ok := t.preparing(key); ok && role == api.RoleTarget {
		j.view.PeerNode, j.view.IncomingID = p.PeerNode, p.ID
	}
	t.jobs[jobKey{socket, ref.Name}] = j
	t.addEvent(j, time.Now(), "tracker", "job found: "+why)
	t.log.Info("migration job found", zap.String("domain", ref.Name), zap.String("role", string(role)), zap.String("why", why))
	if t.cfg.OnStart != nil {
		v := j.view
		go t.cfg.OnStart(v)
	}
	return j
}

// finish ends a job and moves it to history; the caller holds t.mu.
func (t *Tracker) finish(j *job, phase api.Phase, reason string, at time.Time) {
	if j.view.Phase.Finished() {
		return
	}
	if j.view.Mode == api.ModePostCopy && (phase == api.PhaseFailed || phase == api.PhaseAborted) {
		// Once in post-copy the only good ending is completion: any other
		// leaves the guest's memory split between the two hosts.
		reason = "post-copy failed: " + reason
		phase = api.PhasePostCopyFailed
	}
	if phase == api.PhasePostCopyFailed {
		if d, ok := t.recoverable(j); ok {
			t.pause(j, d, reason, at)
			return
		}
		if t.cfg.VerifyPostCopyFailure && j.view.Role == api.RoleSource && !j.qemuSaid {
			t.askQEMU(j, reason, at)
			return
		}
	}
	driverPending := false
	key := jobKey{j.view.Socket, j.view.Domain}
	if d, ok := t.driving(key); ok && j.view.Role == api.RoleSource {
		// The driver's account names what libvirt cannot: the proxy, the
		// link, a deadline that aborted the job (which libvirt records as
		// a cancel, as if a client had asked). Until it has given it, the
		// job is not counted: its class may still change.
		driverPending = !d.Ended
		if d.Failure != "" && (phase == api.PhaseFailed || (phase == api.PhaseAborted && byDeadline(d.Failure))) {
			reason = d.Failure
		}
		if by := d.completedBy(); by != "" && phase == api.PhaseLost {
			// The driver's account came first (DriveEnded and
			// DriveSettled cover the other order).
			t.addEvent(j, at, "driver", by)
			phase, reason = api.PhaseCompleted, ""
		}
		if d.Proxy != nil {
			j.setProxy(d.Proxy)
		}
		t.shown(key, d)
	}
	// A prepare of the domain's next migration may already be recorded
	// when this job's end is seen late; it stays.
	t.incomingEnded(j)
	switch j.view.AbortStatus {
	case api.AbortAborting:
		if phase == api.PhaseCompleted {
			j.view.AbortStatus = api.AbortFailed
			t.addEvent(j, at, "abort", "abort failed: the migration completed before it took effect")
		} else if phase == api.PhaseFailed && j.failedInLibvirt {
			j.view.AbortStatus = api.AbortFailed
			t.addEvent(j, at, "abort", "abort did not take effect: the migration failed on its own first")
		} else {
			j.view.AbortStatus = api.AbortSucceeded
			if phase == api.PhaseFailed {
				phase, reason = api.PhaseAborted, "aborted on request through Ferry"
			}
			switch {
			case phase == api.PhaseAborted && j.view.AbortedBy == AbortByPolicy:
				reason = "aborted by the convergence policy: " + j.abortWhy
			case phase == api.PhaseAborted && j.view.AbortedBy == AbortByDeadline:
				reason = "aborted at its deadline: " + j.abortWhy
			}
		}
	}
	j.view.Phase = phase
	j.view.FailureReason = reason
	t.classify(j, at)
	j.view.EtaSeconds = nil
	j.view.EndTime = &at
	j.view.UpdateTime = at
	if phase == api.PhaseCompleted {
		j.view.ProgressPercent = 100
		j.view.DataRemainingBytes = 0
		j.view.MemoryRemainingBytes = 0
	}
	if n := len(j.iters); n > 0 && j.iters[n-1].End == nil {
		j.iters[n-1].End = &at
	}
	detail := string(phase)
	if reason != "" {
		detail += ": " + reason
	}
	t.addEvent(j, at, "tracker", "job ended "+detail)
	delete(t.jobs, key)
	if old := t.history.push(j); old != nil && t.latest[jobKey{old.view.Socket, old.view.Domain}] == old {
		delete(t.latest, jobKey{old.view.Socket, old.view.Domain})
	}
	t.latest[key] = j
	switch {
	case j.recovered:
	case driverPending:
		j.countPending = true
	default:
		t.count(j)
	}
	if phase == api.PhasePostCopyFailed {
		t.ledger.add(ledgerRecord{Socket: j.view.Socket, Domain: j.view.Domain, UUID: j.view.UUID, Role: j.view.Role, Detected: at})
	}
	if !j.recovered {
		t.finals[key] = j
	}
	lvl := t.log.Info
	if phase != api.PhaseCompleted {
		lvl = t.log.Warn
	}
	lvl("migration job ended", zap.String("domain", j.view.Domain), zap.String("role", string(j.view.Role)),
		zap.String("phase", string(phase)), zap.String("reason", reason), zap.Uint64("iteration", j.view.Iteration))
	t.publish(j)
	if t.cfg.OnFinish != nil {
		v := j.view
		go t.cfg.OnFinish(v)
	}
}

// classify sets a finished job's failure class from what it holds; the
// caller holds t.mu. A job counted already is counted again under its new
// class, so the totals say what the job says.
func (t *Tracker) classify(j *job, at time.Time) {
	var plane api.FailurePlane
	var class api.FailureClass
	var evidence []string
	f := ClassifyFailure(j.view)
	if f != nil {
		plane, class, evidence = f.Plane, f.Class, f.Evidence
	}
	changed := plane != j.view.FailurePlane || class != j.view.FailureClass
	j.view.FailurePlane, j.view.FailureClass, j.view.FailureEvidence = plane, class, evidence
	if !changed {
		return
	}
	if f != nil {
		t.addEvent(j, at, "failure", fmt.Sprintf("%s/%s: %s", plane, class, strings.Join(evidence, "; ")))
	}
	if j.counted {
		t.recount(j)
	}
}

// recount moves a counted job to the totals its view says now.
func (t *Tracker) recount(j *job) {
	t.totals[j.countedAs]--
	if t.totals[j.countedAs] == 0 {
		delete(t.totals, j.countedAs)
	}
	t.count(j)
}

// count adds a finished job to the totals; the caller holds t.mu.
func (t *Tracker) count(j *job) {
	j.countedAs = Total{j.view.Role, resultLabel(j.view.Phase), j.view.FailurePlane, j.view.FailureClass}
	j.counted = true
	t.totals[j.countedAs]++
}

func resultLabel(p api.Phase) string {
	switch p {
	case api.PhaseCompleted:
		return "completed"
	case api.PhaseAborted:
		return "aborted"
	case api.PhasePostCopyFailed:
		return "postcopy_failed"
	case api.PhaseLost:
		return "lost"
	}
	return "failed"
}

func (t *Tracker) addEvent(j *job, at time.Time, kind, detail string) {
	j.events.push(api.Event{Time: at, Kind: kind, Detail: clip(detail)})
}

// maxText bounds what a job keeps of one text libvirt gave it (an error,
// a reason): a libvirt that is not what it says could send megabytes, and
// a job keeps hundreds of them.
const maxText = 2048

// clip cuts s to maxText bytes, on a character's boundary.
func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	return strings.ToValidUTF8(s[:maxText], "") + "…"
}
