package migration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// errReached stands for libvirt's answer: a request that gets it was let
// through to the call.
var errReached = errors.New("the call was made")

// reach is an act that records what it was given and answers errReached.
func reach(got *Acting) Act {
	return Act{Call: func(_ context.Context, on Acting) error {
		*got = on
		return errReached
	}}
}

// unreachable is an act whose libvirt cannot be reached now.
func unreachable(called *bool) Act {
	return Act{
		Reach: func(Acting) error { return ErrNoLibvirt },
		Call: func(context.Context, Acting) error {
			*called = true
			return nil
		},
	}
}

// An act that cannot reach libvirt asks it nothing, and so leaves nothing
// on the job: an abort no libvirt heard of must not class the migration's
// end as the operator's.
func TestAnActThatCannotReachLibvirtLeavesNoRecord(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	before, _ := tr.Job(dom.Name)
	var called bool
	if _, err := tr.Abort(context.Background(), JobRef{Domain: dom.Name}, false, AbortByOperator, "", unreachable(&called)); !errors.Is(err, ErrNoLibvirt) {
		t.Errorf("abort: %v, want ErrNoLibvirt", err)
	}
	if _, err := tr.StartPostCopy(context.Background(), JobRef{Domain: dom.Name}, "by a test", unreachable(&called)); !errors.Is(err, ErrNoLibvirt) {
		t.Errorf("post-copy: %v, want ErrNoLibvirt", err)
	}
	if err := tr.SetMaxDowntime(context.Background(), JobRef{Domain: dom.Name}, time.Second, unreachable(&called)); !errors.Is(err, ErrNoLibvirt) {
		t.Errorf("max downtime: %v, want ErrNoLibvirt", err)
	}
	after, _ := tr.Job(dom.Name)
	if called || after.AbortStatus != "" || after.AbortedBy != "" || len(after.Events) != len(before.Events) || after.MaxDowntimeMs != before.MaxDowntimeMs {
		t.Errorf("called %v; job after: abortStatus %q by %q, %d events (before %d), max downtime %d ms", called, after.AbortStatus, after.AbortedBy,
			len(after.Events), len(before.Events), after.MaxDowntimeMs)
	}
}

// The policy acts on the job it judged, by its ID; another job of the
// domain is not it.
func TestAnActByIDTakesThatJobOnly(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	j, _ := tr.Job(dom.Name)
	var on Acting
	if _, err := tr.Abort(context.Background(), JobRef{ID: j.ID}, false, AbortByPolicy, "stalled", reach(&on)); !errors.Is(err, errReached) || on.Domain.Name != dom.Name {
		t.Fatalf("abort by ID: %v, made on %+v", err, on)
	}
	if got, _ := tr.Job(dom.Name); got.AbortedBy != AbortByPolicy {
		t.Errorf("abortedBy %q, want policy", got.AbortedBy)
	}
	if _, err := tr.Abort(context.Background(), JobRef{ID: j.ID + "0"}, false, AbortByPolicy, "stalled", reach(&on)); !errors.Is(err, ErrNoJob) {
		t.Errorf("abort of another ID: %v, want ErrNoJob", err)
	}
}

func TestAbortInPostCopyRefusedWithoutForce(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)

	var on Acting
	_, err := tr.Abort(context.Background(), JobRef{Domain: dom.Name}, false, AbortByOperator, "", reach(&on))
	if !errors.Is(err, ErrPostCopyNeedsForce) {
		t.Fatalf("error %v, want ErrPostCopyNeedsForce", err)
	}
	for _, want := range []string{"paused", "stops on both nodes", "split across two hosts", "irrecoverable", "manual", "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	j, _ := tr.Job(dom.Name)
	if j.Phase != api.PhaseRunning || j.AbortStatus != "" {
		t.Fatalf("a refused abort changed the job: phase %s, abortStatus %q", j.Phase, j.AbortStatus)
	}
	if ev := j.Events[len(j.Events)-1]; ev.Kind != "abort" || !strings.Contains(ev.Detail, "refused") {
		t.Errorf("the refusal is not on the job's evidence: last event %+v", ev)
	}

	if on != (Acting{}) {
		t.Fatalf("a refused abort made the call: %+v", on)
	}
	if _, err := tr.Abort(context.Background(), JobRef{Domain: dom.Name}, true, AbortByOperator, "", reach(&on)); !errors.Is(err, errReached) || !on.PostCopy {
		t.Fatalf("forced abort: error %v, call %+v: want the call made, as a post-copy abort", err, on)
	}
	if j, _ := tr.Job(dom.Name); j.AbortStatus != api.AbortFailed {
		t.Errorf("abortStatus %q after the call failed, want Failed", j.AbortStatus)
	}
}

func TestAbortInPreCopyNeedsNoForce(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	var on Acting
	if _, err := tr.Abort(context.Background(), JobRef{Domain: dom.Name}, false, AbortByOperator, "", reach(&on)); !errors.Is(err, errReached) || on.PostCopy {
		t.Fatalf("pre-copy abort: error %v, call %+v: want the call made, as a pre-copy abort", err, on)
	}
}

// A migration that fails on its own while an abort is on its way is the
// failure libvirt says it was, not the operator's abort.
func TestAnAbortOvertakenByAFailureIsNotTheOperators(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	ok := Act{Call: func(context.Context, Acting) error { return nil }}
	if _, err := tr.Abort(context.Background(), JobRef{Domain: dom.Name}, false, AbortByOperator, "", ok); err != nil {
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
