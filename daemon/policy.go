package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
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
	// apply carries a decision out on the job it judged (through act).
	apply func(ctx context.Context, j api.Job, d policy.Decision) error
	act   policyActs
	// driven finds a migration Ferry drives by its ID while it runs; nil
	// without the proxy.
	driven func(id string) (drive.Driven, bool)
	// advised hears the first advice on each job (a KubeVirt VMI gets it
	// as an Event); nil without Kubernetes.
	advised func(j api.Job, step api.PolicyStep)

	mu sync.Mutex
	// mem and told are per job ID, for jobs the policy does not merely
	// observe; swept of jobs no longer in flight.
	mem  map[string]*policy.Memory
	told map[string]bool
}

// policyActs carries the policy's decisions out on the job it judged (a
// drive.Actuator).
type policyActs interface {
	Policy(j api.Job) policy.Actuator
}

// steerCallTimeout bounds one libvirt call of the policy: a stuck QEMU
// monitor must not stall the decisions of other jobs.
const steerCallTimeout = 15 * time.Second

// sweepEvery drops the memory of jobs whose end the coalescing Watch
// stream never delivered.
const sweepEvery = time.Minute

// actions is ferry_migration_policy_actions_total (metrics.NewPolicyActions).
func newSteerer(t *migration.Tracker, node policy.Settings, name string, log *zap.Logger, actions *prometheus.CounterVec) *steerer {
	s := &steerer{t: t, node: node, name: name, log: log, mem: map[string]*policy.Memory{}, told: map[string]bool{},
		actions: actions}
	s.apply = s.carryOut
	return s
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
// own, bound to its migration ID, else the node's. A migration Ferry
// drives whose owner is gone (its Perform returned) is steered by nobody:
// ok is false.
func (s *steerer) settingsFor(j api.Job) (_ policy.Settings, _ drive.Driven, driven, ok bool) {
	if j.Proxy != nil && j.Proxy.MigrationID != "" {
		if s.driven == nil {
			return s.node, drive.Driven{}, false, false
		}
		dp, found := s.driven(j.Proxy.MigrationID)
		return dp.Settings, dp, true, found
	}
	return s.node, drive.Driven{}, false, true
}

// consider decides at most once per pass of each source pre-copy job.
func (s *steerer) consider(ctx context.Context, j api.Job) {
	s.mu.Lock()
	if j.Phase.Finished() || j.Role != api.RoleSource {
		delete(s.mem, j.ID)
		delete(s.told, j.ID)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	settings, dp, driven, ok := s.settingsFor(j)
	if !ok {
		return
	}
	mode := settings.ModeFor(driven)
	if mode == policy.Observe || j.Mode != api.ModePreCopy || dp.HeldBack {
		// Held at a trickle while another has the link, its passes are
		// the scheduler's doing, not the guest's.
		return
	}
	s.mu.Lock()
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
	d := policy.Decide(settings, policy.Evidence{Job: full, PostCopyEnabled: dp.PostCopy, Deadline: dp.Deadline, DeadlineOwned: driven,
		MaxDowntime: time.Duration(full.MaxDowntimeMs) * time.Millisecond}, m) // from the API's view of libvirt's
	if d.Action == policy.None {
		return
	}
	step := api.PolicyStep{Time: time.Now(), Iteration: d.Iteration, Action: string(d.Action), Trigger: d.Trigger,
		MaxDowntimeMs: uint64(d.MaxDowntime / time.Millisecond), Reason: d.Reason, Applied: mode == policy.Act}
	// Recorded before it is carried out: an abort ends the job at once,
	// and the job's failure class is read from this step.
	s.t.Acts().RecordPolicy(j.ID, string(mode), step)
	if mode == policy.Act {
		cctx, cancel := context.WithTimeout(ctx, steerCallTimeout)
		if err := s.apply(cctx, j, d); err != nil {
			step.Error = err.Error()
			s.t.Acts().PolicyStepFailed(j.ID, step.Error)
		}
		cancel()
	}
	s.actions.WithLabelValues(s.name, string(d.Action), string(mode)).Inc()
	s.log.Info("convergence policy", zap.String("domain", j.Domain), zap.String("job", j.ID), zap.String("mode", string(mode)),
		zap.String("action", string(d.Action)), zap.Uint64("iteration", d.Iteration), zap.String("trigger", d.Trigger),
		zap.Duration("maxDowntime", d.MaxDowntime), zap.String("reason", d.Reason), zap.String("error", step.Error))
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

func (s *steerer) carryOut(ctx context.Context, j api.Job, d policy.Decision) error {
	return policy.Apply(ctx, s.act.Policy(j), d)
}
