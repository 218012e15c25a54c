package drive

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
)

// Owner is the one actor on a driven migration's libvirt job while its
// Perform runs. The deadline, the convergence policy, the post-copy timer
// and an operator's abort or switch are requests to it, applied one at a
// time in the order asked, each against libvirt's job state read just
// before. So an abort never reaches QEMU just after a switch, a switch
// asked before QEMU's migration is active waits for it, and a second
// switch or abort is answered by the first.
type Owner struct {
	socket, domain string
	dom            libvirt.Domain
	job            jobControl
	rec            record
	// postCopy: the migration was started with VIR_MIGRATE_POSTCOPY.
	postCopy bool
	log      *zap.Logger
	// grace is how long past the deadline a switch to post-copy may take
	// before the migration is aborted instead; retryAbort how often the
	// deadline's abort is asked again.
	grace, retryAbort time.Duration

	reqs  chan *request
	done  chan struct{} // closed by the driver once Perform has returned
	ended chan struct{} // closed when the owner has stopped

	// Only run's goroutine touches these. closed: past the deadline's
	// grace, no switch is made any more.
	switched, aborting, closed bool
	switchedAt                 time.Time
	// switchAsked is set before the first switch to post-copy is asked of
	// libvirt, for the driver: the migration may be in post-copy.
	switchAsked atomic.Bool
}

// jobControl is what the owner asks of libvirt, on the migration's own
// connection (a *libvirtx.Conn).
type jobControl interface {
	DomainState(ctx context.Context, dom libvirt.Domain) (libvirtx.State, int32, error)
	JobStats(ctx context.Context, dom libvirt.Domain, completed bool) (libvirtx.JobStats, error)
	AbortJob(ctx context.Context, dom libvirt.Domain, postCopy bool) error
	StartPostCopy(ctx context.Context, dom libvirt.Domain) error
	SetMaxDowntime(ctx context.Context, dom libvirt.Domain, d time.Duration) error
	SetMaxSpeed(ctx context.Context, dom libvirt.Domain, mibs uint64) error
}

// record keeps on the job what the owner does: its acts (Acts), and its
// refusals (Account.Note).
type record interface {
	Abort(tg migration.JobRef, force bool, by, why string) (*migration.Asked, error)
	MaxDowntime(tg migration.JobRef, d time.Duration) (*migration.Asked, error)
	PostCopy(tg migration.JobRef, by string) (*migration.Asked, error)
	Note(socket, domain, kind, detail string)
}

// ownerRecord is the owner's record: its acts, and its refusals noted in
// the driver's account.
type ownerRecord struct {
	Acts
	*Books
}

type op int

const (
	opDowntime op = iota
	opSwitch
	opAbort
	opSpeed
)

type request struct {
	op       op
	by, why  string
	force    bool
	downtime time.Duration
	// speed is a bandwidth cap in MiB/s (opSpeed).
	speed uint64
	reply chan reply // buffered: run never waits for an asker
	// waiting is closed once a switch waits for QEMU's migration: the
	// owner has taken it, and will make it.
	waiting chan struct{}
	// asked is when it was asked; gone is set once its asker stopped
	// waiting before the owner took it, which then drops it: applied
	// later, it would act on a state its asker never saw.
	asked time.Time
	gone  atomic.Bool
}

// isWaiting says whether the owner holds r as a waiting switch.
func (r *request) isWaiting() bool {
	select {
	case <-r.waiting:
		return true
	default:
		return false
	}
}

// wait marks a switch as waiting, once.
func (r *request) wait() {
	if !r.isWaiting() {
		close(r.waiting)
	}
}

type reply struct {
	abort api.AbortResult
	job   api.Job
	err   error
}

func (r *request) answer(rep reply) {
	if r.reply != nil {
		r.reply <- rep
	}
}

// Errors of the owner's answers.
var (
	// ErrSwitchWaiting: the switch is asked and waits for QEMU's migration
	// to become active; it is made as soon as QEMU takes it.
	ErrSwitchWaiting = errors.New("the switch to post-copy waits for QEMU's migration to become active")
	// ErrAborting: an abort was taken, so nothing else is.
	ErrAborting = errors.New("the migration is being aborted")
	// ErrNoPostCopy: the migration was started without post-copy.
	ErrNoPostCopy = errors.New("the migration was not started with post-copy allowed (ferryctl migrate --postcopy)")
	errEnded      = fmt.Errorf("%w: its Perform has returned, and nothing is left to steer", migration.ErrNoJob)
	// errBusy: the owner had not taken the request when the asker's time
	// ran out; it may still apply it.
	errBusy = errors.New("the migration's owner did not answer in time (a libvirt call before it is slow): a request it had not taken yet is dropped; the job's events say what was done")
)

// Timing of the owner.
const (
	// ownerCallTimeout bounds one libvirt call: a stuck QEMU monitor must
	// not stall the requests behind it for long.
	ownerCallTimeout = 15 * time.Second
	// switchRetry is how often a waiting switch is asked again.
	switchRetry = 200 * time.Millisecond
	// abortRetry is how often the deadline's abort is asked again until
	// libvirt takes one, and how long a taken abort may leave the
	// migration running before libvirt is asked once more.
	abortRetry = 5 * time.Second
	abortStuck = time.Minute
)

func newOwner(socket, domain string, dom libvirt.Domain, job jobControl, rec record, postCopy bool, log *zap.Logger) *Owner {
	return &Owner{socket: socket, domain: domain, dom: dom, job: job, rec: rec, postCopy: postCopy, log: log, grace: postCopyGrace, retryAbort: abortRetry,
		reqs: make(chan *request, 16), done: make(chan struct{}), ended: make(chan struct{})}
}

// Socket is the libvirt the migration's domain runs on.
func (o *Owner) Socket() string { return o.socket }

// MayBePostCopy says whether a switch to post-copy was ever asked: past
// it, the guest may run on the target whatever the source's libvirt
// says.
func (o *Owner) MayBePostCopy() bool { return o.switchAsked.Load() }

// Abort asks the owner to abort the migration; by and why say who asked
// and, for the policy or the deadline, on what figures.
func (o *Owner) Abort(ctx context.Context, by, why string, force bool) (api.AbortResult, error) {
	rep := o.ask(ctx, &request{op: opAbort, by: by, why: why, force: force})
	return rep.abort, rep.err
}

// StartPostCopy asks the owner to switch the migration to post-copy. One
// asked before QEMU's migration is active waits for it: past ctx the
// answer is ErrSwitchWaiting, and the switch is still made.
func (o *Owner) StartPostCopy(ctx context.Context, by string) (api.Job, error) {
	r := &request{op: opSwitch, by: by, waiting: make(chan struct{})}
	rep := o.ask(ctx, r)
	if errors.Is(rep.err, errBusy) && r.isWaiting() {
		return rep.job, ErrSwitchWaiting
	}
	return rep.job, rep.err
}

// SetMaxDowntime asks the owner to set libvirt's max downtime.
func (o *Owner) SetMaxDowntime(ctx context.Context, d time.Duration) error {
	return o.ask(ctx, &request{op: opDowntime, downtime: d}).err
}

// SetMaxSpeed asks the owner to cap the migration's bandwidth, in MiB/s:
// the node's scheduler shares the link so.
func (o *Owner) SetMaxSpeed(ctx context.Context, mibs uint64) error {
	return o.ask(ctx, &request{op: opSpeed, speed: mibs}).err
}

func (o *Owner) ask(ctx context.Context, r *request) reply {
	r.reply, r.asked = make(chan reply, 1), time.Now()
	if r.waiting == nil {
		r.waiting = make(chan struct{})
	}
	select {
	case <-o.ended:
		return reply{err: errEnded}
	default:
	}
	select {
	case o.reqs <- r:
	case <-o.ended:
		return reply{err: errEnded}
	case <-ctx.Done():
		return reply{err: fmt.Errorf("%w: %v", errBusy, ctx.Err())}
	}
	select {
	case rep := <-r.reply:
		return rep
	case <-o.ended:
		// A request queued as the owner stopped is never taken.
		select {
		case rep := <-r.reply:
			return rep
		default:
			return reply{err: errEnded}
		}
	case <-ctx.Done():
		r.gone.Store(true)
		select {
		case rep := <-r.reply:
			return rep
		default:
			return reply{err: fmt.Errorf("%w: %v", errBusy, ctx.Err())}
		}
	}
}

// Policy is the owner as the convergence policy acts through it.
func (o *Owner) Policy() policy.Actuator { return policyActs{o} }

type policyActs struct{ o *Owner }

func (a policyActs) SetMaxDowntime(ctx context.Context, d time.Duration) error {
	return a.o.SetMaxDowntime(ctx, d)
}

func (a policyActs) StartPostCopy(ctx context.Context) error {
	_, err := a.o.StartPostCopy(ctx, "by the convergence policy")
	if errors.Is(err, migration.ErrAlreadyPostCopy) {
		return nil // the deadline or an operator switched first
	}
	return err
}

func (a policyActs) Abort(ctx context.Context, why string) error {
	_, err := a.o.Abort(ctx, migration.AbortByPolicy, why, false)
	return err
}

// run applies requests until Perform returns (done). At deadline it
// switches to post-copy if the migration may, and aborts it if not, or if
// the switch was not taken within the grace; the deadline's abort is asked
// again until libvirt takes one. With switchAfter set it switches then.
func (o *Owner) run(deadline, switchAfter time.Duration) {
	defer close(o.ended)
	dl := time.NewTimer(deadline)
	defer dl.Stop()
	var timer <-chan time.Time
	if switchAfter > 0 {
		t := time.NewTimer(switchAfter)
		defer t.Stop()
		timer = t.C
	}
	l := &ownerLoop{o: o, deadline: deadline}
	for {
		r, ok := l.next(dl.C, timer)
		if !ok {
			o.stop(l.waiting)
			return
		}
		if r != nil {
			l.handle(r)
		}
	}
}

// ownerLoop is what run keeps between requests: the timers it set and the
// switches waiting for QEMU's migration.
type ownerLoop struct {
	o        *Owner
	deadline time.Duration

	giveUp <-chan time.Time // the grace past the deadline for a switch
	retry  <-chan time.Time // a waiting switch is asked again
	again  <-chan time.Time // the deadline's abort is asked again
	stuck  <-chan time.Time // an abort libvirt took has not ended the job
	// waiting are the switches waiting for QEMU's migration, answered
	// with the first.
	waiting       []*request
	deadlineAbort *request
}

// next turns what happens into the next request to apply: nil when an
// event needs none, !ok once Perform has returned, which ends everything,
// even with requests queued. What was asked first is applied first: a
// request queued before a timer fired goes before the timer's.
func (l *ownerLoop) next(deadline, timer <-chan time.Time) (*request, bool) {
	o := l.o
	select {
	case <-o.done:
		return nil, false
	default:
	}
	select {
	case r := <-o.reqs:
		return r, true
	default:
	}
	select {
	case <-o.done:
		return nil, false
	case r := <-o.reqs:
		return r, true
	case <-timer:
		return &request{op: opSwitch, by: "by the post-copy timer", waiting: make(chan struct{})}, true
	case <-deadline:
		return l.atDeadline(), true
	case <-l.giveUp:
		return l.pastGrace(), true
	case <-l.again:
		l.again = nil
		if o.aborting || o.switched {
			return nil, true
		}
		return l.deadlineAbort, true
	case <-l.stuck:
		l.abortAgain()
		return nil, true
	case <-l.retry:
		l.retry = nil
		if len(l.waiting) == 0 {
			return nil, true
		}
		return l.waiting[0], true
	}
}

func (l *ownerLoop) atDeadline() *request {
	why := fmt.Sprintf("the migration ran past its deadline of %s", l.deadline.Round(time.Second))
	if l.o.postCopy {
		l.giveUp = time.After(l.o.grace)
		return &request{op: opSwitch, by: "at the deadline: " + why, waiting: make(chan struct{})}
	}
	l.deadlineAbort = &request{op: opAbort, by: migration.AbortByDeadline, why: why}
	return l.deadlineAbort
}

// pastGrace: from now on no switch is made, as one taken later would
// reach the target after it may have given the migration up, with the
// guest running there; the migration is aborted instead.
func (l *ownerLoop) pastGrace() *request {
	o := l.o
	if o.switched {
		return nil
	}
	o.closed = true
	l.answerWaiting(reply{err: fmt.Errorf("%w: the switch to post-copy was not taken within %s of the deadline", ErrAborting, o.grace)})
	l.deadlineAbort = &request{op: opAbort, by: migration.AbortByDeadline,
		why: fmt.Sprintf("the migration ran past its deadline of %s, and the switch to post-copy was not taken within %s", l.deadline.Round(time.Second), o.grace)}
	return l.deadlineAbort
}

// abortAgain: libvirt took the abort and its migration still runs. It is
// asked again, as libvirt's client would not, rather than wait on a job
// that never ends.
func (l *ownerLoop) abortAgain() {
	o := l.o
	o.log.Error("the migration still runs a while after libvirt took its abort; asking libvirt again", zap.Duration("since", abortStuck))
	ctx, cancel := context.WithTimeout(context.Background(), ownerCallTimeout)
	if err := o.job.AbortJob(ctx, o.dom, false); err != nil {
		o.log.Warn("libvirt refused the repeated abort", zap.Error(err))
	}
	cancel()
	l.stuck = time.After(abortStuck)
}

func (l *ownerLoop) answerWaiting(rep reply) {
	for _, w := range l.waiting {
		w.answer(rep)
	}
	l.waiting, l.retry = nil, nil
}

// handle applies one request and sets what follows from its answer.
func (l *ownerLoop) handle(r *request) {
	o := l.o
	if r.gone.Load() && !r.isWaiting() {
		r.answer(reply{err: errBusy})
		return
	}
	if r.op == opSwitch && len(l.waiting) > 0 && r != l.waiting[0] {
		r.wait()
		l.waiting = append(l.waiting, r) // answered with the first
		return
	}
	rep, ask := o.apply(r)
	switch {
	case r.op == opSwitch && ask && r.gone.Load() && !r.isWaiting():
		// Its asker heard it was not taken: not made later either.
		r.answer(rep)
	case r.op == opSwitch && ask:
		if len(l.waiting) == 0 {
			r.wait()
			l.waiting = append(l.waiting, r)
			o.log.Info("the switch to post-copy waits for QEMU's migration", zap.String("by", r.by), zap.Error(rep.err))
		}
		l.retry = time.After(switchRetry)
	case r.op == opSwitch:
		if len(l.waiting) == 0 {
			l.waiting = []*request{r}
		}
		l.answerWaiting(rep)
	default:
		r.answer(rep)
		if r == l.deadlineAbort && rep.err != nil && !o.aborting {
			o.log.Warn("the deadline's abort was not taken; asking again", zap.Error(rep.err))
			l.again = time.After(o.retryAbort)
		}
		if r.op == opAbort && rep.err == nil {
			l.answerWaiting(reply{err: fmt.Errorf("%w: the switch to post-copy was dropped", ErrAborting)})
			l.stuck = time.After(abortStuck)
		}
	}
}

// stop answers what is left once Perform has returned.
func (o *Owner) stop(waiting []*request) {
	for _, w := range waiting {
		w.answer(reply{err: errEnded})
	}
	for {
		select {
		case r := <-o.reqs:
			r.answer(reply{err: errEnded})
		default:
			return
		}
	}
}

// apply carries r out against libvirt's job as it is now; again says a
// switch is to be asked again (QEMU's migration is not active yet).
func (o *Owner) apply(r *request) (rep reply, again bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ownerCallTimeout)
	defer cancel()
	if r.op == opSwitch && !o.postCopy {
		return o.refuse(r, fmt.Errorf("%w: %s", ErrNoPostCopy, o.domain)), false
	}
	postCopy, active, err := o.state(ctx)
	if err != nil {
		return reply{err: fmt.Errorf("reading the migration's state from libvirt: %w", err)}, r.op == opSwitch
	}
	postCopy = postCopy || o.switched
	switch r.op {
	case opSwitch:
		return o.applySwitch(ctx, r, postCopy, active)
	case opAbort:
		return o.applyAbort(ctx, r, postCopy, active), false
	case opSpeed:
		if !active {
			return reply{err: fmt.Errorf("%w: %s's migration has no libvirt job now", migration.ErrNoJob, o.domain)}, false
		}
		return reply{err: o.job.SetMaxSpeed(ctx, o.dom, r.speed)}, false
	}
	switch {
	case postCopy:
		return reply{err: fmt.Errorf("%w: %s has no switch-over downtime to set", migration.ErrAlreadyPostCopy, o.domain)}, false
	case o.aborting:
		return reply{err: ErrAborting}, false
	case !active:
		return reply{err: fmt.Errorf("%w: %s's migration has no libvirt job now", migration.ErrNoJob, o.domain)}, false
	}
	on, err := o.rec.MaxDowntime(o.target(), r.downtime)
	_, err = o.made(ctx, on, err, "max downtime", func(ctx context.Context, _ bool) error {
		return o.job.SetMaxDowntime(ctx, o.dom, r.downtime)
	})
	return reply{err: err}, false
}

func (o *Owner) applySwitch(ctx context.Context, r *request, postCopy, active bool) (reply, bool) {
	switch {
	case postCopy:
		return reply{err: fmt.Errorf("%w: %s", migration.ErrAlreadyPostCopy, o.domain)}, false
	case o.aborting || o.closed:
		return o.refuse(r, ErrAborting), false
	case !active:
		return reply{err: errors.New("QEMU's migration is not active yet")}, true
	}
	o.switchAsked.Store(true)
	on, err := o.rec.PostCopy(o.target(), r.by)
	j, err := o.made(ctx, on, err, "switch to post-copy "+r.by, func(ctx context.Context, _ bool) error { return o.job.StartPostCopy(ctx, o.dom) })
	switch {
	case errors.Is(err, migration.ErrAlreadyPostCopy):
		o.switched, o.switchedAt = true, time.Now()
		return reply{err: err}, false
	case err != nil:
		// QEMU refuses a switch in its migration's setup: asked again.
		return reply{err: err}, true
	}
	o.switched, o.switchedAt = true, time.Now()
	o.log.Info("switched to post-copy", zap.String("by", r.by))
	return reply{job: j}, false
}

func (o *Owner) applyAbort(ctx context.Context, r *request, postCopy, active bool) reply {
	switch {
	case o.aborting:
		return o.refuse(r, fmt.Errorf("%w already", ErrAborting))
	case postCopy && !r.force:
		return o.refuse(r, migration.PostCopyRefusal(o.domain))
	case postCopy && r.asked.Before(o.switchedAt):
		// Forced in pre-copy, where it costs nothing; applied now it
		// would split the guest, which nobody asked for knowingly.
		return o.refuse(r, fmt.Errorf("%w: the abort was asked before the switch to post-copy, and is not applied after it; ask again (with --force) if the guest is to be paused in post-copy", migration.ErrPostCopyNeedsForce))
	case !active && !postCopy:
		return reply{err: fmt.Errorf("%w: %s's migration has no libvirt job now", migration.ErrNoJob, o.domain)}
	}
	on, err := o.rec.Abort(o.target(), r.force, r.by, r.why)
	j, err := o.made(ctx, on, err, "abort by "+r.by+": "+r.why, func(ctx context.Context, inPostCopy bool) error {
		return o.job.AbortJob(ctx, o.dom, inPostCopy || postCopy)
	})
	if err == nil {
		o.aborting = true
		o.log.Warn("migration aborted", zap.String("by", r.by), zap.String("why", r.why), zap.Bool("postCopy", postCopy))
	}
	return reply{abort: migration.AbortResult(on, j, err), err: err}
}

// made makes call, the libvirt call of an act the record let through (on),
// and records its outcome. When the tracker has no job to record it on
// (its own connection to libvirt is cut, say) call is made all the same:
// the record is evidence, never a condition of acting on the migration.
func (o *Owner) made(ctx context.Context, on *migration.Asked, err error, what string, call func(ctx context.Context, inPostCopy bool) error) (api.Job, error) {
	switch {
	case err == nil:
		return on.Done(call(ctx, on.PostCopy))
	case errors.Is(err, migration.ErrNoJob):
		o.log.Warn("the tracker has no job of the migration; acting on libvirt without its record", zap.String("what", what))
		return api.Job{}, call(ctx, false)
	}
	return api.Job{}, err
}

// target names the migration's job to the tracker.
func (o *Owner) target() migration.JobRef {
	return migration.JobRef{Socket: o.socket, Domain: o.domain}
}

// refuse answers r with err, and leaves the refusal on the job.
func (o *Owner) refuse(r *request, err error) reply {
	what := map[op]string{opDowntime: "max downtime", opSwitch: "post-copy", opAbort: "abort"}[r.op]
	o.rec.Note(o.socket, o.domain, what, fmt.Sprintf("%s refused: %v", what, err))
	return reply{err: err}
}

// state is libvirt's word on the migration now: whether the source is
// held by post-copy, and whether its job runs.
func (o *Owner) state(ctx context.Context) (postCopy, active bool, err error) {
	st, reason, err := o.job.DomainState(ctx, o.dom)
	if err != nil {
		return false, false, err
	}
	if libvirtx.InPostCopy(st, reason) {
		return true, true, nil
	}
	js, err := o.job.JobStats(ctx, o.dom, false)
	if err != nil {
		return false, false, err
	}
	return false, js.Type.Active(), nil
}
