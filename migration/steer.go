package migration

import (
	"context"
	"fmt"
	"time"
)

// PolicyStep is one decision of the convergence policy, kept on the job as
// evidence whether or not it was carried out.
type PolicyStep struct {
	Time          time.Time `json:"time"`
	Iteration     uint64    `json:"iteration"`
	Action        string    `json:"action"`
	Trigger       string    `json:"trigger,omitempty"`
	MaxDowntimeMs uint64    `json:"maxDowntimeMs,omitempty"`
	Reason        string    `json:"reason"`
	// Applied: the policy acted; false when it only advised.
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"`
}

// PolicyInfo is the policy's record on a job.
type PolicyInfo struct {
	Mode  string       `json:"mode"`
	Steps []PolicyStep `json:"steps,omitempty"`
}

// maxPolicySteps bounds the record; a policy takes at most one step a pass
// and few before it switches over, to post-copy, or aborts.
const maxPolicySteps = 32

// RecordPolicy puts a policy decision on the domain's in-flight source job.
func (t *Tracker) RecordPolicy(domain, mode string, step PolicyStep) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j, err := t.sourceJob(domain, "policy")
	if err != nil {
		return
	}
	if j.view.Policy == nil {
		j.view.Policy = &PolicyInfo{}
	}
	j.view.Policy.Mode = mode
	if step.Action != "" {
		if step.Time.IsZero() {
			step.Time = time.Now()
		}
		p := j.view.Policy
		p.Steps = append(p.Steps, step)
		if len(p.Steps) > maxPolicySteps {
			p.Steps = p.Steps[len(p.Steps)-maxPolicySteps:]
		}
		verb := "advises"
		if step.Applied {
			verb = "acts"
		}
		detail := fmt.Sprintf("%s %s at pass %d: %s", verb, step.Action, step.Iteration, step.Reason)
		if step.Error != "" {
			detail += "; failed: " + step.Error
		}
		t.addEvent(j, step.Time, "policy", detail)
	}
	t.publish(j)
}

// SetMaxDowntime raises the allowed downtime of the domain's in-flight
// pre-copy migration.
func (t *Tracker) SetMaxDowntime(ctx context.Context, domain string, d time.Duration) error {
	t.mu.Lock()
	j, err := t.sourceJob(domain, "set max downtime")
	if err != nil {
		t.mu.Unlock()
		return err
	}
	c, ref := t.conns[j.view.Socket], j.ref
	t.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%w: cannot set %s's max downtime now", ErrNoLibvirt, domain)
	}
	if err := c.SetMaxDowntime(ctx, ref, d); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.maxDowntime != d {
		t.addEvent(j, time.Now(), "libvirt", fmt.Sprintf("max downtime set to %v (was %v)", d, j.maxDowntime))
	}
	j.maxDowntime, j.maxDowntimeIter = d, j.view.Iteration
	j.view.MaxDowntimeMs = uint64(d / time.Millisecond)
	t.publish(j)
	return nil
}
