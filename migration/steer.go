package migration

import (
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// maxPolicySteps bounds the record; a policy takes at most one step a pass
// and few before it switches over, to post-copy, or aborts.
const maxPolicySteps = 32

// sourceJobByID finds an in-flight source job by its ID; the caller holds
// t.mu. The policy acts on the job it judged, never on another of the
// same name on another libvirt socket.
func (t *Tracker) sourceJobByID(id, action string) (*job, error) {
	for _, j := range t.jobs {
		if j.view.ID == id {
			if j.view.Role != api.RoleSource {
				return nil, fmt.Errorf("%w: job %s is a target job; %s on the source node", ErrNotSource, id, action)
			}
			return j, nil
		}
	}
	return nil, fmt.Errorf("%w: job %s on node %s", ErrNoJob, id, t.cfg.Node)
}

// RecordPolicy puts a policy decision on the job with that ID, in flight
// or, when the decision ended it, just finished.
func (a Acts) RecordPolicy(id, mode string, step api.PolicyStep) {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.policyJob(id)
	if j == nil {
		return
	}
	// Published views share the pointer: a new record, never an edit.
	p := &api.PolicyInfo{Mode: mode}
	if old := j.view.Policy; old != nil {
		p.Steps = append([]api.PolicyStep(nil), old.Steps...)
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
func (a Acts) PolicyStepFailed(id, why string) {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.policyJob(id)
	if j == nil || j.view.Policy == nil || len(j.view.Policy.Steps) == 0 {
		return
	}
	p := &api.PolicyInfo{Mode: j.view.Policy.Mode, Steps: append([]api.PolicyStep(nil), j.view.Policy.Steps...)}
	j.view.Policy = p
	last := &p.Steps[len(p.Steps)-1]
	last.Error = why
	t.addEvent(j, time.Now(), "policy", fmt.Sprintf("%s at pass %d failed: %s", last.Action, last.Iteration, why))
	t.publish(j)
}

// JobByID returns the in-flight job with that ID, with its samples,
// iterations and events.
func (t *Tracker) JobByID(id string) (api.Job, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range t.jobs {
		if j.view.ID == id {
			v := j.view
			v.Samples = j.samples.slice()
			v.Iterations = iterationsView(j.iters)
			v.Events = j.events.slice()
			return v, true
		}
	}
	return api.Job{}, false
}
