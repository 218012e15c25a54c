package daemon

import (
	"context"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
)

// steerer runs the convergence policy over the tracker's record: it reads
// jobs, never feeds them, and what it decides goes back to the tracker as
// evidence on the job.
type steerer struct {
	t       *migration.Tracker
	node    policy.Settings
	log     *zap.Logger
	actions *prometheus.CounterVec
	// apply carries a decision out; a field so that tests of the loop can
	// see what it would do.
	apply func(ctx context.Context, domain string, d policy.Decision) error
	// advised hears the first advice on each job (a KubeVirt VMI gets it
	// as an Event); nil without Kubernetes.
	advised func(j migration.Job, step migration.PolicyStep)

	mu     sync.Mutex
	driven map[string]drivenPolicy
	mem    map[steerKey]*policy.Memory
	told   map[steerKey]bool
}

// drivenPolicy is what a migration Ferry drives was started with.
type drivenPolicy struct {
	settings policy.Settings
	postCopy bool
}

// A job is one (socket, domain, start): a domain migrated twice gets a
// fresh memory.
type steerKey struct {
	socket, domain string
	start          time.Time
}

// callTimeout bounds one libvirt call of the policy: a stuck QEMU monitor
// must not stall the decisions of other jobs.
const steerCallTimeout = 15 * time.Second

func newSteerer(t *migration.Tracker, node policy.Settings, log *zap.Logger, reg prometheus.Registerer) *steerer {
	s := &steerer{t: t, node: node, log: log, driven: map[string]drivenPolicy{}, mem: map[steerKey]*policy.Memory{}, told: map[steerKey]bool{},
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_migration_policy_actions_total",
			Help: "Decisions of the convergence policy, by action and by mode: act (carried out) or advise (shown only).",
		}, []string{"action", "mode"})}
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
	for j := range s.t.Watch(ctx) {
		s.consider(ctx, j)
	}
}

// consider decides at most once per pass of each source pre-copy job.
func (s *steerer) consider(ctx context.Context, j migration.Job) {
	key := steerKey{j.Socket, j.Domain, j.StartTime}
	s.mu.Lock()
	if j.Phase.Finished() || j.Role != migration.RoleSource {
		delete(s.mem, key)
		delete(s.told, key)
		if j.Phase.Finished() && j.Proxy != nil {
			delete(s.driven, j.Domain)
		}
		s.mu.Unlock()
		return
	}
	settings, postCopy := s.node, false
	dp, isDriven := s.driven[j.Domain]
	if isDriven && j.Proxy != nil {
		settings, postCopy = dp.settings, dp.postCopy
	}
	mode := settings.ModeFor(j.Proxy != nil)
	m := s.mem[key]
	if m == nil {
		m = &policy.Memory{}
		s.mem[key] = m
	}
	s.mu.Unlock()
	if mode == policy.Observe || j.Mode != migration.ModePreCopy || j.Iteration <= m.Iteration {
		return
	}
	full, ok := s.t.Job(j.Domain)
	if !ok || full.Socket != j.Socket || !full.StartTime.Equal(j.StartTime) {
		return
	}
	d := policy.Decide(settings, policy.Evidence{Job: full, PostCopyEnabled: postCopy,
		MaxDowntime: time.Duration(full.MaxDowntimeMs) * time.Millisecond}, m)
	if d.Action == policy.None {
		return
	}
	step := migration.PolicyStep{Time: time.Now(), Iteration: d.Iteration, Action: string(d.Action), Trigger: d.Trigger,
		MaxDowntimeMs: d.MaxDowntimeMs, Reason: d.Reason, Applied: mode == policy.Act}
	if mode == policy.Act {
		cctx, cancel := context.WithTimeout(ctx, steerCallTimeout)
		if err := s.apply(cctx, j.Domain, d); err != nil {
			step.Error = err.Error()
		}
		cancel()
	}
	s.t.RecordPolicy(j.Domain, string(mode), step)
	s.mu.Lock()
	first := mode == policy.Advise && !s.told[key]
	s.told[key] = s.told[key] || first
	s.mu.Unlock()
	if first && s.advised != nil {
		s.advised(full, step)
	}
	s.actions.WithLabelValues(string(d.Action), string(mode)).Inc()
	s.log.Info("convergence policy", zap.String("domain", j.Domain), zap.String("mode", string(mode)),
		zap.String("action", string(d.Action)), zap.Uint64("iteration", d.Iteration), zap.String("trigger", d.Trigger),
		zap.Uint64("maxDowntimeMs", d.MaxDowntimeMs), zap.String("reason", d.Reason), zap.String("error", step.Error))
}

func (s *steerer) carryOut(ctx context.Context, domain string, d policy.Decision) error {
	switch d.Action {
	case policy.RaiseDowntime, policy.SwitchOver:
		return s.t.SetMaxDowntime(ctx, domain, time.Duration(d.MaxDowntimeMs)*time.Millisecond)
	case policy.PostCopy:
		_, err := s.t.StartPostCopy(domain, func(c *libvirtx.Conn, ref libvirt.Domain) error { return c.StartPostCopy(ctx, ref) })
		return err
	case policy.Abort:
		_, err := s.t.AbortByPolicy(ctx, domain, d.Reason)
		return err
	}
	return nil
}
