package metrics

import "github.com/prometheus/client_golang/prometheus"

var defPolicyActions = define(Def{Name: "ferry_migration_policy_actions_total", Type: Counter, Area: AreaPolicy,
	Help:   "Decisions of the convergence policy, by action and by mode: act (carried out) or advise (shown only).",
	Labels: []string{"node", "action", "mode"}})

// NewPolicyActions builds the convergence policy's counter, which the
// daemon's steerer counts into, and registers it with reg unless reg is
// nil.
func NewPolicyActions(reg prometheus.Registerer) *prometheus.CounterVec {
	v := defPolicyActions.counterVec()
	if reg != nil {
		reg.MustRegister(v)
	}
	return v
}
