package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
)

// steerer runs the convergence policy over the tracker's record: it reads
// jobs, never feeds them, and what it decides goes back to the tracker as
// evidence on the job.
type steerer struct {
	t       *migration.Tracker
	node    policy.Settings
	name    string
	log     *zap.Logger
	actions *prometheus.CounterVec
	// apply carries a decision out on the job with that ID.
	apply func(ctx context.Context, jobID string, d policy.Decision) error
	// advised hears the first advice on each job (a KubeVirt VMI gets it
	// as an Event); nil without Kubernetes.
	advised func(j migration.Job, step migration.PolicyStep)

	mu sync.Mutex
	// driven is what each migration Ferry drives was started with, by
	// domain, until a job of that migration ends.
	driven map[string]drivenPolicy
	// mem and told are per job ID, for jobs the policy does not merely
	// observe; swept of jobs no longer in flight.
	mem  map[string]*policy.Memory
	told map[string]bool
}

// drivenPolicy is what a migration Ferry drives was started with.
type drivenPolicy struct {
	id       string
	settings policy.Settings
	postCopy bool
	// deadline is the backstop the driver enforces itself.
	deadline time.Duration
}

// steerCallTimeout bounds one libvirt call of the policy: a stuck QEMU
// monitor must not stall the decisions of other jobs.
const steerCallTimeout = 15 * time.Second

// sweepEvery drops the memory of jobs whose end the coalescing Watch
// stream never delivered.
const sweepEvery = time.Minute

func newSteerer(t *migration.Tracker, node policy.Settings, name string, log *zap.Logger, reg prometheus.Registerer) *steerer {
	s := &steerer{t: t, node: node, name: name, log: log, driven: map[string]drivenPolicy{}, mem: map[string]*policy.Memory{}, told: map[string]bool{},
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_migration_policy_actions_total",
			Help: "Decisions of the convergence policy, by action and by mode: act (carried out) or advise (shown only).",
		}, []string{"node", "action", "mode"})}
	reg.MustRegister(s.actions)
	s.apply = s.carryOut
	return s
}

// drive records the policy a migration Ferry drives was started with.
func (s *steerer) drive(domain string, p drivenPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.driven[domain] = p
}

func (s *steerer) run(ctx context.Context) {
	jobs := s.t.Watch(ctx)
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	for {
		select {
		case j, ok := <-jobs:
			if !ok {
				return
			}
			s.consider(ctx, j)
		case <-sweep.C:
			s.sweep()
		}
	}
}

func (s *steerer) sweep() {
	live := map[string]bool{}
	for _, j := range s.t.Jobs(false) {
		live[j.ID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.mem {
		if !live[id] {
			delete(s.mem, id)
			delete(s.told, id)
		}
	}
}

// settingsFor is the policy that applies to a job: a driven migration's
// own, bound to its migration ID, else the node's.
func (s *steerer) settingsFor(j migration.Job) (policy.Settings, drivenPolicy, bool) {
	dp, ok := s.driven[j.Domain]
	if ok && j.Proxy != nil && j.Proxy.MigrationID == dp.id {
		return dp.settings, dp, true
	}
	return s.node, drivenPolicy{}, false
}

// consider decides at most once per pass of each source pre-copy job.
func (s *steerer) consider(ctx context.Context, j migration.Job) {
	s.mu.Lock()
	if j.Phase.Finished() || j.Role != migration.RoleSource {
		delete(s.mem, j.ID)
		delete(s.told, j.ID)
		if dp, ok := s.driven[j.Domain]; ok && j.Phase.Finished() && j.Proxy != nil && j.Proxy.MigrationID == dp.id {
			delete(s.driven, j.Domain)
		}
		s.mu.Unlock()
		return
	}
	settings, dp, driven := s.settingsFor(j)
	mode := settings.ModeFor(driven)
	if mode == policy.Observe || j.Mode != migration.ModePreCopy {
		s.mu.Unlock()
		return
	}
	m := s.mem[j.ID]
	if m == nil {
		m = &policy.Memory{}
		s.mem[j.ID] = m
	}
	s.mu.Unlock()
	if j.Iteration <= m.Iteration {
		return
	}
	full, ok := s.t.JobByID(j.ID)
	if !ok {
		return
	}
	d := policy.Decide(settings, policy.Evidence{Job: full, PostCopyEnabled: dp.postCopy, Deadline: dp.deadline,
		MaxDowntime: time.Duration(full.MaxDowntimeMs) * time.Millisecond}, m)
	if d.Action == policy.None {
		return
	}
	step := migration.PolicyStep{Time: time.Now(), Iteration: d.Iteration, Action: string(d.Action), Trigger: d.Trigger,
		MaxDowntimeMs: d.MaxDowntimeMs, Reason: d.Reason, Applied: mode == policy.Act}
	// Recorded before it is carried out: an abort ends the job at once,
	// and the job's failure class is read from this step.
	s.t.RecordPolicy(j.ID, string(mode), step)
	if mode == policy.Act {
		cctx, cancel := context.WithTimeout(ctx, steerCallTimeout)
		if err := s.apply(cctx, j.ID, d); err != nil {
			step.Error = err.Error()
			s.t.PolicyStepFailed(j.ID, step.Error)
		}
		cancel()
	}
	s.actions.WithLabelValues(s.name, string(d.Action), string(mode)).Inc()
	s.log.Info("convergence policy", zap.String("domain", j.Domain), zap.String("job", j.ID), zap.String("mode", string(mode)),
		zap.String("action", string(d.Action)), zap.Uint64("iteration", d.Iteration), zap.String("trigger", d.Trigger),
		zap.Uint64("maxDowntimeMs", d.MaxDowntimeMs), zap.String("reason", d.Reason), zap.String("error", step.Error))
	s.mu.Lock()
	first := mode == policy.Advise && !s.told[j.ID]
	if first {
		s.told[j.ID] = true
	}
	s.mu.Unlock()
	if first && s.advised != nil {
		s.advised(full, step)
	}
}

func (s *steerer) carryOut(ctx context.Context, jobID string, d policy.Decision) error {
	switch d.Action {
	case policy.RaiseDowntime, policy.SwitchOver:
		return s.t.SetMaxDowntime(ctx, jobID, time.Duration(d.MaxDowntimeMs)*time.Millisecond)
	case policy.PostCopy:
		return s.t.StartPostCopyByID(ctx, jobID)
	case policy.Abort:
		_, err := s.t.AbortByPolicy(ctx, jobID, d.Reason)
		return err
	}
	return nil
}
