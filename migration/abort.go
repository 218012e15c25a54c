package migration

import (
	"errors"
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// Errors of Abort, distinguishable by the API layer.
var (
	ErrNoJob       = errors.New("no migration job in flight")
	ErrNotSource   = errors.New("not the source of the migration")
	ErrNoLibvirt   = libvirtx.ErrNotConnected
	ErrAbortFailed = errors.New("libvirt refused the abort")
	// ErrAlreadyPostCopy: a second switch to post-copy is meaningless.
	ErrAlreadyPostCopy = errors.New("already in post-copy")
	// ErrPostCopyNeedsForce: an abort in post-copy cannot be undone and
	// costs the guest, so it is done only when asked for by name.
	ErrPostCopyNeedsForce = errors.New("post-copy cannot be cancelled")
)

// Abort lets an abort of the target's in-flight migration through and
// records it. Pre-copy is cancelled and the guest keeps running on the
// source. Post-copy cannot be cancelled, only paused, which leaves both
// sides post-copy-failed: without force Abort refuses with
// ErrPostCopyNeedsForce, whose message says what the pause would cost;
// with force it is let through as a pause, and Message says so. The job's
// abortStatus is Aborting until the job ends, then Succeeded, or Failed if
// the call failed or the migration completed first. by says who asked
// (AbortByOperator, ...), why becomes the failure reason of a policy's or
// deadline's abort.
func (a Acts) Abort(tg JobRef, force bool, by, why string) (*Asked, error) {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j, err := t.actOn(tg, "abort")
	if err != nil {
		return nil, err
	}
	if j.view.Mode == api.ModePostCopy && !force {
		t.addEvent(j, time.Now(), "abort", "abort refused: the migration is in post-copy and the abort was not forced")
		return nil, PostCopyRefusal(j.view.Domain)
	}
	on := t.asked(j)
	if j.view.AbortStatus != api.AbortAborting {
		// The first taker's: a second abort asked meanwhile (the policy's
		// while the operator's is out) does not rewrite whose it is.
		j.view.AbortStatus, j.view.AbortedBy, j.abortWhy = api.AbortAborting, by, why
	}
	j.abortsAsked++
	on.Message = "abort requested: pre-copy is being cancelled; the guest keeps running on the source"
	switch by {
	case AbortByPolicy:
		on.Message = "abort requested by the convergence policy: " + why
	case AbortByDeadline:
		on.Message = "abort requested at the migration's deadline: " + why
	}
	if on.PostCopy {
		on.Message = "forced abort in post-copy: the migration is being paused (libvirt's post-copy abort); the guest stops on both nodes, its memory is split across two hosts, a KubeVirt VMI is marked irrecoverable, and recovery is manual"
	}
	t.addEventOnce(j, time.Now(), "abort", on.Message)
	t.publish(j)
	on.done = func(err error) (api.Job, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		j.abortsAsked--
		j.abortTaken = j.abortTaken || err == nil
		if err != nil {
			if !j.view.Phase.Finished() && j.abortsAsked == 0 && !j.abortTaken {
				j.view.AbortStatus = api.AbortFailed
			}
			t.addEventOnce(j, time.Now(), "abort", "abort failed: "+err.Error())
			t.publish(j)
			return j.view, fmt.Errorf("%w: %w", ErrAbortFailed, err)
		}
		return j.view, nil
	}
	return on, nil
}

// AbortResult is what an abort tells its asker: on is what the tracker let
// through (nil when it had no job to record the abort on), j and err what
// its Done returned.
func AbortResult(on *Asked, j api.Job, err error) api.AbortResult {
	switch {
	case err != nil:
		return api.AbortResult{Job: j, Message: "abort failed"}
	case on == nil:
		return api.AbortResult{Job: j, Message: "abort requested"}
	}
	return api.AbortResult{Job: j, Message: on.Message}
}

// Who asked for an abort.
const (
	AbortByOperator = "operator"
	AbortByPolicy   = "policy"
	// AbortByDeadline: a migration Ferry drives outran its deadline.
	AbortByDeadline = "deadline"
)

// PostCopyRefusal spells out the cost of a post-copy abort, since the
// operator reading it decides whether to pay it.
func PostCopyRefusal(domain string) error {
	return fmt.Errorf("%w: %s's migration is in post-copy, so an abort would not cancel it but pause it: "+
		"the guest stops on both nodes (the source stays paused, the target's copy stalls on the first page it lacks), "+
		"its memory is split across two hosts, a KubeVirt VMI is marked irrecoverable, and recovery is manual. "+
		"Letting post-copy finish keeps the guest. To pause it anyway: ferryctl abort %s --force (API: POST /v1/jobs/%s/abort?force=1)",
		ErrPostCopyNeedsForce, domain, domain, domain)
}

// sourceJob finds the domain's in-flight job that this node is the source
// of, or says why an action cannot be taken here; the caller holds t.mu.
func (t *Tracker) sourceJob(socket, domain, action string) (*job, error) {
	if err := t.unambiguous(socket, domain); err != nil {
		return nil, err
	}
	for k, j := range t.jobs {
		if k.domain != domain || !onSocket(socket, k.socket) {
			continue
		}
		if j.view.Role != api.RoleSource {
			return nil, fmt.Errorf("%w: node %s is the target of %s's migration; %s on the source node", ErrNotSource, t.cfg.Node, domain, action)
		}
		return j, nil
	}
	return nil, fmt.Errorf("%w for domain %q%s on node %s", ErrNoJob, domain, onWhich(socket), t.cfg.Node)
}
