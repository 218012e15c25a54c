package migration

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors of Abort, distinguishable by the API layer.
var (
	ErrNoJob       = errors.New("no migration job in flight")
	ErrNotSource   = errors.New("not the source of the migration")
	ErrNoLibvirt   = errors.New("libvirt connection is down")
	ErrAbortFailed = errors.New("libvirt refused the abort")
	// ErrAlreadyPostCopy: a second switch to post-copy is meaningless.
	ErrAlreadyPostCopy = errors.New("already in post-copy")
	// ErrPostCopyNeedsForce: an abort in post-copy cannot be undone and
	// costs the guest, so it is done only when asked for by name.
	ErrPostCopyNeedsForce = errors.New("post-copy cannot be cancelled")
)

// AbortResult says what an abort request did.
type AbortResult struct {
	Job     Job    `json:"job"`
	Message string `json:"message"`
}

// Abort asks libvirt to abort the domain's in-flight migration. Pre-copy is
// cancelled and the guest keeps running on the source. Post-copy cannot be
// cancelled, only paused, which leaves both sides post-copy-failed: without
// force Abort refuses with ErrPostCopyNeedsForce, whose message says what
// the pause would cost; with force it pauses and the result says so. The
// job's abortStatus is Aborting until the job ends, then Succeeded, or
// Failed if libvirt refused or the migration completed first.
// A socket, if named, picks the domain of that name on that socket.
func (t *Tracker) Abort(ctx context.Context, socket, domain string, force bool) (AbortResult, error) {
	return t.abort(ctx, func() (*job, error) { return t.sourceJob(socket, domain, "abort") }, domain, force, AbortByOperator, "", nil)
}

// AbortWith is Abort as the owner of a migration Ferry drives makes it:
// by whoever asked, and through call, on the migration's own connection.
func (t *Tracker) AbortWith(ctx context.Context, socket, domain string, force bool, by, why string, call Act) (AbortResult, error) {
	return t.abort(ctx, func() (*job, error) { return t.sourceJob(socket, domain, "abort") }, domain, force, by, why, call)
}

// Act is a libvirt call on a job's domain that its caller makes on a
// connection of its own; postCopy says the job is in post-copy.
type Act func(ctx context.Context, postCopy bool) error

// Who asked for an abort.
const (
	AbortByOperator = "operator"
	AbortByPolicy   = "policy"
	// AbortByDeadline: a migration Ferry drives outran its deadline.
	AbortByDeadline = "deadline"
)

// AbortByPolicy aborts the pre-copy job with that ID, which the policy
// gave up on; why (with its figures) becomes the job's failure reason.
func (t *Tracker) AbortByPolicy(ctx context.Context, id, why string) (AbortResult, error) {
	return t.abort(ctx, func() (*job, error) { return t.sourceJobByID(id, "abort") }, id, false, AbortByPolicy, why, nil)
}

// abort records the abort on the job and makes it: through call, or on
// the tracker's own connection when call is nil.
func (t *Tracker) abort(ctx context.Context, find func() (*job, error), domain string, force bool, by, why string, call Act) (AbortResult, error) {
	t.mu.Lock()
	j, err := find()
	if err != nil {
		t.mu.Unlock()
		return AbortResult{}, err
	}
	postCopy := j.view.Mode == ModePostCopy
	if postCopy && !force {
		t.addEvent(j, time.Now(), "abort", "abort refused: the migration is in post-copy and the abort was not forced")
		t.mu.Unlock()
		return AbortResult{}, PostCopyRefusal(domain)
	}
	c := t.conns[j.view.Socket]
	ref := j.ref
	if call == nil && c != nil {
		call = func(ctx context.Context, postCopy bool) error { return c.AbortJob(ctx, ref, postCopy) }
	}
	if call == nil {
		t.mu.Unlock()
		return AbortResult{}, fmt.Errorf("%w (%s): cannot abort %s now", ErrNoLibvirt, j.view.Socket, domain)
	}
	now := time.Now()
	j.view.AbortStatus, j.view.AbortedBy, j.abortWhy = AbortAborting, by, why
	msg := "abort requested: pre-copy is being cancelled; the guest keeps running on the source"
	switch by {
	case AbortByPolicy:
		msg = "abort requested by the convergence policy: " + why
	case AbortByDeadline:
		msg = "abort requested at the migration's deadline: " + why
	}
	if postCopy {
		msg = "forced abort in post-copy: the migration is being paused (libvirt's post-copy abort); the guest stops on both nodes, its memory is split across two hosts, a KubeVirt VMI is marked irrecoverable, and recovery is manual"
	}
	t.addEventOnce(j, now, "abort", msg)
	t.publish(j)
	t.mu.Unlock()

	err = call(ctx, postCopy)

	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if !j.view.Phase.Finished() {
			j.view.AbortStatus = AbortFailed
		}
		t.addEventOnce(j, time.Now(), "abort", "abort failed: "+err.Error())
		t.publish(j)
		return AbortResult{Job: j.view, Message: "abort failed"}, fmt.Errorf("%w: %v", ErrAbortFailed, err)
	}
	return AbortResult{Job: j.view, Message: msg}, nil
}

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
		if j.view.Role != RoleSource {
			return nil, fmt.Errorf("%w: node %s is the target of %s's migration; %s on the source node", ErrNotSource, t.cfg.Node, domain, action)
		}
		return j, nil
	}
	return nil, fmt.Errorf("%w for domain %q%s on node %s", ErrNoJob, domain, onWhich(socket), t.cfg.Node)
}
