package migration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/libvirtx"
)

// The tracker has no libvirt connection here: a refusal must come before
// libvirt is needed, and ErrNoLibvirt shows a request got past it.

func TestAbortInPostCopyRefusedWithoutForce(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)

	_, err := tr.Abort(context.Background(), "", dom.Name, false)
	if !errors.Is(err, ErrPostCopyNeedsForce) {
		t.Fatalf("error %v, want ErrPostCopyNeedsForce", err)
	}
	for _, want := range []string{"paused", "stops on both nodes", "split across two hosts", "irrecoverable", "manual", "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	j, _ := tr.Job(dom.Name)
	if j.Phase != PhaseRunning || j.AbortStatus != "" {
		t.Fatalf("a refused abort changed the job: phase %s, abortStatus %q", j.Phase, j.AbortStatus)
	}
	if ev := j.Events[len(j.Events)-1]; ev.Kind != "abort" || !strings.Contains(ev.Detail, "refused") {
		t.Errorf("the refusal is not on the job's evidence: last event %+v", ev)
	}

	if _, err := tr.Abort(context.Background(), "", dom.Name, true); !errors.Is(err, ErrNoLibvirt) {
		t.Fatalf("forced abort: error %v, want it past the refusal (ErrNoLibvirt without a connection)", err)
	}
}

func TestAbortInPreCopyNeedsNoForce(t *testing.T) {
	f := newFeed(t, "a")
	tr := f.tr
	f.stats(outgoing(1, 300))
	if _, err := tr.Abort(context.Background(), "", dom.Name, false); !errors.Is(err, ErrNoLibvirt) {
		t.Fatalf("pre-copy abort: error %v, want it past any refusal (ErrNoLibvirt without a connection)", err)
	}
}
