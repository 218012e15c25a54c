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

// sourceJobByID finds an in-flight source job by its ID; the caller holds
// t.mu. The policy acts on the job it judged, never on another of the
// same name on another libvirt socket.
func (t *Tracker) sourceJobByID(id, action string) (*job, error) {
	for _, j := range t.jobs {
		if j.view.ID == id {
			if j.view.Role != RoleSource {
				return nil, fmt.Errorf("%w: job %s is a target job; %s on the source node", ErrNotSource, id, action)
			}
			return j, nil
		}
	}
	return nil, fmt.Errorf("%w: job %s on node %s", ErrNoJob, id, t.cfg.Node)
}

// RecordPolicy puts a policy decision on the job with that ID, in flight
// or, when the decision ended it, just finished.
func (t *Tracker) RecordPolicy(id, mode string, step PolicyStep) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.policyJob(id)
	if j == nil {
		return
	}
	// Published views share the pointer: a new record, never an edit.
	p := &PolicyInfo{Mode: mode}
	if old := j.view.Policy; old != nil {
		p.Steps = append([]PolicyStep(nil), old.Steps...)
	}
	j.view.Policy = p
	if step.Action != "" {
		if step.Time.IsZero() {
			step.Time = time.Now()
		}
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

// policyJob is the source job with that ID, in flight or, when a
// decision just ended it, finished; the caller holds t.mu.
func (t *Tracker) policyJob(id string) *job {
	if j, err := t.sourceJobByID(id, "policy"); err == nil {
		return j
	}
	for _, l := range t.latest {
		if l.view.ID == id {
			return l
		}
	}
	return nil
}

// PolicyStepFailed notes that the last policy step of the job with that
// ID could not be carried out.
func (t *Tracker) PolicyStepFailed(id, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.policyJob(id)
	if j == nil || j.view.Policy == nil || len(j.view.Policy.Steps) == 0 {
		return
	}
	p := &PolicyInfo{Mode: j.view.Policy.Mode, Steps: append([]PolicyStep(nil), j.view.Policy.Steps...)}
	j.view.Policy = p
	last := &p.Steps[len(p.Steps)-1]
	last.Error = why
	t.addEvent(j, time.Now(), "policy", fmt.Sprintf("%s at pass %d failed: %s", last.Action, last.Iteration, why))
	t.publish(j)
}

// SetMaxDowntime raises the allowed downtime of the pre-copy job with that ID.
func (t *Tracker) SetMaxDowntime(ctx context.Context, id string, d time.Duration) error {
	return t.setMaxDowntimeBy(ctx, func() (*job, error) { return t.sourceJobByID(id, "set max downtime") }, d, nil)
}

// SetMaxDowntimeWith is SetMaxDowntime as the owner of a migration Ferry
// drives makes it, through call.
func (t *Tracker) SetMaxDowntimeWith(ctx context.Context, socket, domain string, d time.Duration, call Act) error {
	return t.setMaxDowntimeBy(ctx, func() (*job, error) { return t.sourceJob(socket, domain, "set max downtime") }, d, call)
}

func (t *Tracker) setMaxDowntimeBy(ctx context.Context, find func() (*job, error), d time.Duration, call Act) error {
	t.mu.Lock()
	j, err := find()
	if err != nil {
		t.mu.Unlock()
		return err
	}
	c, ref := t.conns[j.view.Socket], j.ref
	t.mu.Unlock()
	if call == nil && c != nil {
		call = func(ctx context.Context, _ bool) error { return c.SetMaxDowntime(ctx, ref, d) }
	}
	if call == nil {
		return fmt.Errorf("%w: cannot set the max downtime of %s now", ErrNoLibvirt, j.view.Domain)
	}
	asked := time.Now()
	if err := call(ctx, false); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// A reading the sampler asked for before this set is stale.
	j.maxDowntimeSetAt = asked
	if j.maxDowntime != d {
		t.addEvent(j, time.Now(), "libvirt", fmt.Sprintf("max downtime set to %v (was %v)", d, j.maxDowntime))
	}
	j.maxDowntime, j.maxDowntimeIter = d, j.view.Iteration
	j.view.MaxDowntimeMs = uint64(d / time.Millisecond)
	t.publish(j)
	return nil
}

// StartPostCopyByID switches the pre-copy job with that ID to post-copy.
func (t *Tracker) StartPostCopyByID(ctx context.Context, id string) error {
	t.mu.Lock()
	j, err := t.sourceJobByID(id, "switch to post-copy")
	if err != nil {
		t.mu.Unlock()
		return err
	}
	if j.view.Mode == ModePostCopy {
		t.mu.Unlock()
		return fmt.Errorf("%w: job %s", ErrAlreadyPostCopy, id)
	}
	c, ref := t.conns[j.view.Socket], j.ref
	t.addEvent(j, time.Now(), "postcopy", "switch to post-copy requested by the convergence policy")
	t.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%w: cannot switch job %s to post-copy now", ErrNoLibvirt, id)
	}
	if err := c.StartPostCopy(ctx, ref); err != nil {
		t.mu.Lock()
		t.addEvent(j, time.Now(), "postcopy", "switch refused: "+err.Error())
		t.mu.Unlock()
		return fmt.Errorf("libvirt refused the switch to post-copy: %w", err)
	}
	return nil
}

// JobByID returns the in-flight job with that ID, with its samples,
// iterations and events.
func (t *Tracker) JobByID(id string) (Job, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range t.jobs {
		if j.view.ID == id {
			v := j.view
			v.Samples = j.samples.slice()
			v.Iterations = append([]Iteration(nil), j.iters...)
			v.Events = j.events.slice()
			return v, true
		}
	}
	return Job{}, false
}
