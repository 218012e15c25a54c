package drive

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// fakeJob is a source's libvirt job as the owner sees it: it becomes
// active after activeAfter state reads, and a switch puts it in post-copy.
type fakeJob struct {
	mu          sync.Mutex
	reads       int
	activeAfter int
	postCopy    bool
	// refuseSwitch: QEMU refuses the switch (libvirt answers an error).
	refuseSwitch bool
	// failAborts: libvirt refuses this many aborts first.
	failAborts int
	// gate, when set, holds every state read until it is closed; held
	// counts the reads it held.
	gate  chan struct{}
	held  int
	calls []string
}

func (f *fakeJob) DomainState(context.Context, libvirt.Domain) (libvirtx.State, int32, error) {
	if f.gate != nil {
		f.mu.Lock()
		f.held++
		f.mu.Unlock()
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.postCopy {
		return libvirtx.StatePaused, int32(libvirt.DomainPausedPostcopy), nil
	}
	return libvirtx.StateRunning, int32(libvirt.DomainRunningMigrated), nil
}

func (f *fakeJob) JobStats(context.Context, libvirt.Domain, bool) (libvirtx.JobStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads > f.activeAfter {
		return libvirtx.JobStats{Type: libvirtx.JobUnbounded}, nil
	}
	return libvirtx.JobStats{Type: libvirtx.JobNone}, nil
}

func (f *fakeJob) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeJob) AbortJob(_ context.Context, _ libvirt.Domain, postCopy bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAborts > 0 {
		f.failAborts--
		f.calls = append(f.calls, "abort refused")
		return errors.New("operation failed: abort refused")
	}
	f.calls = append(f.calls, fmt.Sprintf("abort postCopy=%v", postCopy))
	return nil
}

func (f *fakeJob) StartPostCopy(context.Context, libvirt.Domain) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuseSwitch {
		return errors.New("operation failed: QEMU refused")
	}
	f.calls = append(f.calls, "switch")
	f.postCopy = true
	return nil
}

func (f *fakeJob) SetMaxDowntime(_ context.Context, _ libvirt.Domain, d time.Duration) error {
	f.record("downtime " + d.String())
	return nil
}

func (f *fakeJob) SetMaxSpeed(_ context.Context, _ libvirt.Domain, mibs uint64) error {
	f.record(fmt.Sprintf("speed %d", mibs))
	return nil
}

func (f *fakeJob) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// fakeBooks lets the owner's acts through, as the tracker does once it
// has recorded them; with noJob, it has no job to record them on.
type fakeBooks struct{ noJob bool }

func (fakeBooks) Note(_, _, _, _ string) {}

func (b fakeBooks) let() (*migration.Asked, error) {
	if b.noJob {
		return nil, migration.ErrNoJob
	}
	return &migration.Asked{}, nil
}

func (b fakeBooks) Abort(migration.JobRef, bool, string, string) (*migration.Asked, error) {
	return b.let()
}

func (b fakeBooks) MaxDowntime(migration.JobRef, time.Duration) (*migration.Asked, error) {
	return b.let()
}

func (b fakeBooks) PostCopy(migration.JobRef, string) (*migration.Asked, error) { return b.let() }

func startOwner(t *testing.T, job *fakeJob, postCopy bool, deadline, switchAfter time.Duration) *Owner {
	t.Helper()
	o := newOwner("/run/libvirt/libvirt-sock", "vm", libvirt.Domain{Name: "vm"}, job, fakeBooks{}, postCopy, zap.NewNop())
	o.grace, o.retryAbort = 300*time.Millisecond, 50*time.Millisecond
	go o.run(deadline, switchAfter)
	t.Cleanup(func() {
		select {
		case <-o.done:
		default:
			close(o.done)
		}
		<-o.ended
	})
	return o
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func equal(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// A switch asked before QEMU's migration is active waits for it: the
// asker hears so, and the switch is made once QEMU can take it.
func TestOwnerSwitchAskedTooEarlyWaitsForTheMigration(t *testing.T) {
	job := &fakeJob{activeAfter: 10}
	o := startOwner(t, job, true, time.Hour, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := o.StartPostCopy(ctx, "by a test"); !errors.Is(err, ErrSwitchWaiting) {
		t.Fatalf("early switch: %v, want ErrSwitchWaiting", err)
	}
	waitFor(t, "the switch", func() bool { return equal(job.log(), []string{"switch"}) })
}

// After the switch an abort would split the guest: refused unless forced,
// and libvirt never hears the unforced one.
func TestOwnerRefusesAnAbortAfterTheSwitch(t *testing.T) {
	job := &fakeJob{}
	o := startOwner(t, job, true, time.Hour, 0)
	if _, err := o.StartPostCopy(context.Background(), "by a test"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Abort(context.Background(), migration.AbortByOperator, "", false); !errors.Is(err, migration.ErrPostCopyNeedsForce) {
		t.Fatalf("abort after the switch: %v, want ErrPostCopyNeedsForce", err)
	}
	if _, err := o.StartPostCopy(context.Background(), "again"); !errors.Is(err, migration.ErrAlreadyPostCopy) {
		t.Fatalf("second switch: %v, want ErrAlreadyPostCopy", err)
	}
	if got := job.log(); !equal(got, []string{"switch"}) {
		t.Fatalf("libvirt heard %v, want one switch only", got)
	}
}

// An abort taken drops a switch still waiting, and answers a second abort
// itself: libvirt hears one abort and no switch.
func TestOwnerAbortDropsAWaitingSwitch(t *testing.T) {
	job := &fakeJob{activeAfter: 1 << 30}
	o := startOwner(t, job, true, time.Hour, 0)
	switched := make(chan error, 1)
	go func() {
		_, err := o.StartPostCopy(context.Background(), "by a test")
		switched <- err
	}()
	waitFor(t, "the switch to wait", func() bool { job.mu.Lock(); defer job.mu.Unlock(); return job.reads > 2 })
	job.mu.Lock()
	job.activeAfter = 0
	job.mu.Unlock()
	if _, err := o.Abort(context.Background(), migration.AbortByOperator, "", false); err != nil {
		t.Fatalf("abort: %v", err)
	}
	select {
	case err := <-switched:
		if !errors.Is(err, ErrAborting) {
			t.Fatalf("the waiting switch heard %v, want ErrAborting", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting switch was never answered")
	}
	if _, err := o.Abort(context.Background(), migration.AbortByOperator, "", false); !errors.Is(err, ErrAborting) {
		t.Fatalf("second abort: %v, want ErrAborting", err)
	}
	time.Sleep(3 * switchRetry)
	if got := job.log(); !equal(got, []string{"abort postCopy=false"}) {
		t.Fatalf("libvirt heard %v, want one abort", got)
	}
}

// At the deadline a migration that may switch to post-copy does; one that
// may not is aborted; one whose switch is not taken within the grace is
// aborted then.
func TestOwnerActsAtTheDeadline(t *testing.T) {
	job := &fakeJob{}
	startOwner(t, job, true, 20*time.Millisecond, 0)
	waitFor(t, "the switch at the deadline", func() bool { return equal(job.log(), []string{"switch"}) })

	job = &fakeJob{}
	startOwner(t, job, false, 20*time.Millisecond, 0)
	waitFor(t, "the abort at the deadline", func() bool { return equal(job.log(), []string{"abort postCopy=false"}) })

	job = &fakeJob{refuseSwitch: true}
	startOwner(t, job, true, 20*time.Millisecond, 0)
	waitFor(t, "the abort past the grace", func() bool { return len(job.log()) > 0 })
	if got := job.log(); !equal(got, []string{"abort postCopy=false"}) {
		t.Fatalf("libvirt heard %v, want an abort and no switch", got)
	}
}

// The post-copy timer is one more request: the operator's abort that
// came first wins, and the timer's switch is never made.
func TestOwnerTimerSwitchesInOrder(t *testing.T) {
	job := &fakeJob{}
	o := startOwner(t, job, true, time.Hour, 100*time.Millisecond)
	if err := o.SetMaxDowntime(context.Background(), 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the timer's switch", func() bool { return len(job.log()) == 2 })
	if err := o.SetMaxDowntime(context.Background(), time.Second); !errors.Is(err, migration.ErrAlreadyPostCopy) {
		t.Fatalf("downtime in post-copy: %v, want ErrAlreadyPostCopy", err)
	}
	if got := job.log(); !equal(got, []string{"downtime 500ms", "switch"}) {
		t.Fatalf("libvirt heard %v", got)
	}

	job = &fakeJob{}
	o = startOwner(t, job, true, time.Hour, 200*time.Millisecond)
	if _, err := o.Abort(context.Background(), migration.AbortByOperator, "", false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if got := job.log(); !equal(got, []string{"abort postCopy=false"}) {
		t.Fatalf("libvirt heard %v, want the abort only", got)
	}
}

// Once Perform has returned, the owner answers that nothing is left.
func TestOwnerEndsWithPerform(t *testing.T) {
	o := startOwner(t, &fakeJob{}, true, time.Hour, 0)
	close(o.done)
	<-o.ended
	if _, err := o.Abort(context.Background(), migration.AbortByOperator, "", false); !errors.Is(err, migration.ErrNoJob) {
		t.Fatalf("abort after Perform: %v, want ErrNoJob", err)
	}
}

// The deadline's abort is asked again until libvirt takes one: Perform
// has no bound of its own to fall back on.
func TestOwnerAsksTheDeadlinesAbortUntilTaken(t *testing.T) {
	job := &fakeJob{failAborts: 1}
	startOwner(t, job, false, 20*time.Millisecond, 0)
	waitFor(t, "the abort taken", func() bool { return len(job.log()) == 2 })
	if got := job.log(); !equal(got, []string{"abort refused", "abort postCopy=false"}) {
		t.Fatalf("libvirt heard %v", got)
	}
}

// A switch of a migration started without post-copy is refused at once,
// never left waiting.
func TestOwnerRefusesASwitchWithoutPostCopy(t *testing.T) {
	job := &fakeJob{activeAfter: 1 << 30}
	o := startOwner(t, job, false, time.Hour, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := o.StartPostCopy(ctx, "by a test"); !errors.Is(err, ErrNoPostCopy) {
		t.Fatalf("switch without post-copy: %v, want ErrNoPostCopy", err)
	}
}

// An abort forced in pre-copy that reaches the owner after the switch is
// not applied: it would split the guest. One forced after the switch is.
func TestOwnerDoesNotApplyAPreCopyForceAfterTheSwitch(t *testing.T) {
	job := &fakeJob{}
	o := startOwner(t, job, true, time.Hour, 0)
	asked := time.Now()
	if _, err := o.StartPostCopy(context.Background(), "by a test"); err != nil {
		t.Fatal(err)
	}
	early := &request{op: opAbort, by: migration.AbortByOperator, force: true, reply: make(chan reply, 1), waiting: make(chan struct{}), asked: asked}
	o.reqs <- early
	if rep := <-early.reply; !errors.Is(rep.err, migration.ErrPostCopyNeedsForce) {
		t.Fatalf("a forced abort asked before the switch: %v, want ErrPostCopyNeedsForce", rep.err)
	}
	if got := job.log(); !equal(got, []string{"switch"}) {
		t.Fatalf("libvirt heard %v, want the switch only", got)
	}
	if _, err := o.Abort(context.Background(), migration.AbortByOperator, "", true); err != nil {
		t.Fatalf("a forced abort asked after the switch: %v", err)
	}
	if got := job.log(); !equal(got, []string{"switch", "abort postCopy=true"}) {
		t.Fatalf("libvirt heard %v, want the switch and a post-copy abort", got)
	}
}

// A request whose asker gave up before the owner took it is dropped, not
// applied later against a state its asker never saw.
func TestOwnerDropsARequestItsAskerGaveUpOn(t *testing.T) {
	job := &fakeJob{gate: make(chan struct{})}
	o := startOwner(t, job, false, time.Hour, 0)
	go o.SetMaxDowntime(context.Background(), time.Second) // holds the owner in a state read
	waitFor(t, "the owner held in a state read", func() bool { job.mu.Lock(); defer job.mu.Unlock(); return job.held > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := o.Abort(ctx, migration.AbortByOperator, "", false); !errors.Is(err, errBusy) {
		t.Fatalf("abort behind a stuck call: %v, want errBusy", err)
	}
	close(job.gate)
	time.Sleep(200 * time.Millisecond)
	if got := job.log(); !equal(got, []string{"downtime 1s"}) {
		t.Fatalf("libvirt heard %v, want the downtime only", got)
	}
}

// With no tracker job to record it on, the owner still acts.
func TestOwnerActsWithoutTheTrackersJob(t *testing.T) {
	job := &fakeJob{}
	o := newOwner("/run/libvirt/libvirt-sock", "vm", libvirt.Domain{Name: "vm"}, job, fakeBooks{noJob: true}, false, zap.NewNop())
	go o.run(time.Hour, 0)
	defer func() { close(o.done); <-o.ended }()
	if _, err := o.Abort(context.Background(), migration.AbortByOperator, "", false); err != nil {
		t.Fatalf("abort with no tracker job: %v", err)
	}
	if got := job.log(); !equal(got, []string{"abort postCopy=false"}) {
		t.Fatalf("libvirt heard %v", got)
	}
}

// Past the deadline's grace no switch is made any more, even once libvirt
// would take it: the target may have given the migration up by then.
func TestOwnerMakesNoSwitchPastTheGrace(t *testing.T) {
	job := &fakeJob{refuseSwitch: true, failAborts: 1 << 30}
	o := startOwner(t, job, true, 20*time.Millisecond, 0)
	waitFor(t, "the abort past the grace", func() bool {
		for _, c := range job.log() {
			if c == "abort refused" {
				return true
			}
		}
		return false
	})
	job.mu.Lock()
	job.refuseSwitch = false
	job.mu.Unlock()
	if _, err := o.StartPostCopy(context.Background(), "by a test"); !errors.Is(err, ErrAborting) {
		t.Fatalf("a switch past the grace: %v, want ErrAborting", err)
	}
	time.Sleep(5 * switchRetry)
	for _, c := range job.log() {
		if c == "switch" {
			t.Fatalf("libvirt heard a switch past the grace: %v", job.log())
		}
	}
}
