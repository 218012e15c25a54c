package migration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// errRefused stands for libvirt's refusal of a call.
var errRefused = errors.New("libvirt refused the call")

// Where names the job by its ID and socket, so that what the actor asks
// next is about that very job: another of the domain is not it.
func TestWhereNamesTheJobAndAnActByIDTakesThatJobOnly(t *testing.T) {
	f := newFeed(t, "a")
	acts := f.tr.Acts()
	f.stats(outgoing(1, 300))
	j, _ := f.tr.Job(dom.Name)
	ref, err := acts.Where(JobRef{Domain: dom.Name}, "abort")
	if err != nil || ref != (JobRef{Socket: j.Socket, Domain: dom.Name, ID: j.ID}) {
		t.Fatalf("where: %+v, %v; want the job's ID and socket", ref, err)
	}
	on, err := acts.Abort(JobRef{ID: j.ID}, false, AbortByPolicy, "stalled")
	if err != nil || on.Domain.Name != dom.Name {
		t.Fatalf("abort by ID: %v, asked on %+v", err, on)
	}
	if got, _ := f.tr.Job(dom.Name); got.AbortedBy != AbortByPolicy || got.AbortStatus != api.AbortAborting {
		t.Errorf("abortedBy %q, status %q: want policy, Aborting", got.AbortedBy, got.AbortStatus)
	}
	if _, err := acts.Abort(JobRef{ID: j.ID + "0"}, false, AbortByPolicy, "stalled"); !errors.Is(err, ErrNoJob) {
		t.Errorf("abort of another ID: %v, want ErrNoJob", err)
	}
}

func TestAbortInPostCopyRefusedWithoutForce(t *testing.T) {
	f := newFeed(t, "a")
	acts := f.tr.Acts()
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)

	on, err := acts.Abort(JobRef{Domain: dom.Name}, false, AbortByOperator, "")
	if !errors.Is(err, ErrPostCopyNeedsForce) || on != nil {
		t.Fatalf("error %v, asked %+v: want ErrPostCopyNeedsForce and nothing asked", err, on)
	}
	for _, want := range []string{"paused", "stops on both nodes", "split across two hosts", "irrecoverable", "manual", "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	j, _ := f.tr.Job(dom.Name)
	if j.Phase != api.PhaseRunning || j.AbortStatus != "" {
		t.Fatalf("a refused abort changed the job: phase %s, abortStatus %q", j.Phase, j.AbortStatus)
	}
	if ev := j.Events[len(j.Events)-1]; ev.Kind != "abort" || !strings.Contains(ev.Detail, "refused") {
		t.Errorf("the refusal is not on the job's evidence: last event %+v", ev)
	}

	on, err = acts.Abort(JobRef{Domain: dom.Name}, true, AbortByOperator, "")
	if err != nil || !on.PostCopy || !strings.Contains(on.Message, "paused") {
		t.Fatalf("forced abort: error %v, asked %+v: want it let through as a post-copy pause", err, on)
	}
	if _, err := on.Done(errRefused); !errors.Is(err, ErrAbortFailed) || !errors.Is(err, errRefused) {
		t.Errorf("done with a refusal: %v, want ErrAbortFailed wrapping libvirt's", err)
	}
	if j, _ := f.tr.Job(dom.Name); j.AbortStatus != api.AbortFailed {
		t.Errorf("abortStatus %q after the call failed, want Failed", j.AbortStatus)
	}
}

func TestAbortInPreCopyNeedsNoForce(t *testing.T) {
	f := newFeed(t, "a")
	f.stats(outgoing(1, 300))
	if on, err := f.tr.Acts().Abort(JobRef{Domain: dom.Name}, false, AbortByOperator, ""); err != nil || on.PostCopy {
		t.Fatalf("pre-copy abort: error %v, asked %+v: want it let through as a pre-copy abort", err, on)
	}
}

// A switch is recorded as asked, and a refusal of it as refused.
func TestPostCopyAskedAndRefusedAreOnTheJob(t *testing.T) {
	f := newFeed(t, "a")
	acts := f.tr.Acts()
	f.stats(outgoing(1, 300))
	on, err := acts.PostCopy(JobRef{Domain: dom.Name}, "by a test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := on.Done(errRefused); !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "post-copy allowed") {
		t.Errorf("done with a refusal: %v, want libvirt's refusal explained", err)
	}
	j, _ := f.tr.Job(dom.Name)
	var said []string
	for _, e := range j.Events {
		if e.Kind == "postcopy" {
			said = append(said, e.Detail)
		}
	}
	if len(said) != 2 || !strings.Contains(said[0], "requested by a test") || !strings.Contains(said[1], "refused") {
		t.Errorf("post-copy events %q, want the request and the refusal", said)
	}
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	if _, err := acts.PostCopy(JobRef{Domain: dom.Name}, "again"); !errors.Is(err, ErrAlreadyPostCopy) {
		t.Errorf("a second switch: %v, want ErrAlreadyPostCopy", err)
	}
}

// A max downtime is recorded once libvirt took it, and not before.
func TestMaxDowntimeIsRecordedOnceMade(t *testing.T) {
	f := newFeed(t, "a")
	acts := f.tr.Acts()
	f.stats(outgoing(1, 300))
	before, _ := f.tr.Job(dom.Name)
	on, err := acts.MaxDowntime(JobRef{Domain: dom.Name}, 700*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := on.Done(errRefused); !errors.Is(err, errRefused) {
		t.Fatalf("refused: %v", err)
	}
	if j, _ := f.tr.Job(dom.Name); j.MaxDowntimeMs != before.MaxDowntimeMs {
		t.Errorf("a refused set recorded %d ms", j.MaxDowntimeMs)
	}
	on, _ = acts.MaxDowntime(JobRef{Domain: dom.Name}, 700*time.Millisecond)
	if j, err := on.Done(nil); err != nil || j.MaxDowntimeMs != 700 {
		t.Errorf("made: %d ms, %v; want 700", j.MaxDowntimeMs, err)
	}
}

// A migration that fails on its own while an abort is on its way is the
// failure libvirt says it was, not the operator's abort.
func TestAnAbortOvertakenByAFailureIsNotTheOperators(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	on, err := tr.Acts().Abort(JobRef{Domain: dom.Name}, false, AbortByOperator, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := on.Done(nil); err != nil {
		t.Fatal(err)
	}
	f.ended(libvirtx.JobStats{Type: libvirtx.JobFailed, Operation: libvirtx.OperationMigrationOut, ErrMsg: "Unable to write to socket: Connection reset by peer"},
		nil, libvirtx.StateRunning, libvirtx.RunningMigrated, nil)
	j, _ := tr.Job(dom.Name)
	if j.Phase != api.PhaseFailed || j.AbortStatus != api.AbortFailed || !strings.Contains(j.FailureReason, "Connection reset") {
		t.Fatalf("phase %s, abortStatus %s, reason %q: want Failed, Failed, libvirt's own reason", j.Phase, j.AbortStatus, j.FailureReason)
	}
	if j.FailurePlane == api.PlaneOperator {
		t.Errorf("classed %s: an abort that did not take effect is not the job's end", j.FailureKind())
	}
}

// A job whose class is settled after it was counted (the driver's account
// of a link or proxy comes later) is counted under its final class only.
func TestTheTotalsFollowAJobsFinalClass(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	f.ended(libvirtx.JobStats{Type: libvirtx.JobFailed, Operation: libvirtx.OperationMigrationOut, ErrMsg: "Unable to write to socket: Connection reset by peer"},
		nil, libvirtx.StateRunning, libvirtx.RunningMigrated, nil)
	j, _ := tr.Job(dom.Name)
	first := Total{Role: api.RoleSource, Result: resultLabel(j.Phase), Plane: j.FailurePlane, Class: j.FailureClass}
	if tr.Snapshot().Totals[first] != 1 {
		t.Fatalf("totals %v, want the job once as %+v", tr.Snapshot().Totals, first)
	}
	tr.mu.Lock()
	last := tr.latest[jobKey{j.Socket, j.Domain}]
	last.view.FailureReason = "the domain stopped during the migration (shutoff/failed)"
	last.view.DomainState = "shutoff/failed"
	tr.classify(last, time.Now())
	final := last.countedAs
	tr.mu.Unlock()
	totals := tr.Snapshot().Totals
	if final == first || totals[first] != 0 || totals[final] != 1 {
		t.Errorf("totals %v after the class moved from %s/%s to %s/%s: want the job once, under the final one", totals, first.Plane, first.Class, final.Plane, final.Class)
	}
}

// Two aborts asked at once (an operator's and the policy's): the first
// taker's is the record, and the other's failure, libvirt having taken
// the first, does not make the abort failed.
func TestASecondAbortNeitherRewritesNorFailsTheFirst(t *testing.T) {
	f := newFeed(t, "a")
	acts := f.tr.Acts()
	f.stats(outgoing(1, 300))
	ref := JobRef{Domain: dom.Name}
	operator, err := acts.Abort(ref, false, AbortByOperator, "")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := acts.Abort(ref, false, AbortByPolicy, "stalled")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Done(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Done(errRefused); !errors.Is(err, ErrAbortFailed) {
		t.Fatalf("the policy's refused abort: %v, want ErrAbortFailed", err)
	}
	if j, _ := f.tr.Job(dom.Name); j.AbortStatus != api.AbortAborting || j.AbortedBy != AbortByOperator {
		t.Errorf("abortStatus %q by %q, want Aborting by the operator", j.AbortStatus, j.AbortedBy)
	}
}
