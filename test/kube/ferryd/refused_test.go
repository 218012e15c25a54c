//go:build kube

package ferryd_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

// An API server that keeps refusing a mark (here: 403, a client without
// ferryd's role) past ParkAfter has the mark set apart on disk and counted,
// not retried forever; a short refusal (an API server starting) is retried.
func TestRefusedMarkIsParked(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "marks-refused")
	migratingVMI(t, ctx, ns, "vm1")
	rc := ferryConfig()
	rc.BearerToken = ""
	dir := t.TempDir()
	r, err := kubevirt.NewReporter(kubevirt.ReporterConfig{
		Node: "node-a", StateDir: dir,
		Dynamic: dynamic.NewForConfigOrDie(rc), Core: kubernetes.NewForConfigOrDie(rc),
		Log: zaptest.NewLogger(t), ParkAfter: time.Nanosecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Report(postCopyMark(ns, "vm1", "node-a", "source")); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, ctx, r)
	if d := r.Delivered(); d["refused"] != 1 {
		t.Errorf("outcomes %v, want refused", d)
	}
	parked, _ := filepath.Glob(filepath.Join(dir, "marks", "refused", "*.json"))
	left, _ := filepath.Glob(filepath.Join(dir, "marks", "*.json"))
	if len(parked) != 1 || len(left) != 0 {
		t.Errorf("parked %v, still pending %v", parked, left)
	}
	if l := getVMI(t, ctx, ns, "vm1").GetLabels(); l[kubevirt.IrrecoverableLabel] != "" {
		t.Errorf("marked anyway: %v", l)
	}
}

// A reason of any length from libvirt lands cut to 1 KiB in the annotation
// and the Event, which live in the VMI owner's namespace.
func TestLongReasonsAreCut(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "marks-long")
	migratingVMI(t, ctx, ns, "vm1")
	r := reporter(t, "node-a", t.TempDir())
	m := postCopyMark(ns, "vm1", "node-a", "source")
	m.Reason = strings.Repeat("é", 64<<10)
	m.Message += ": " + m.Reason
	if err := r.Report(m); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, ctx, r)
	var f kubevirt.Failure
	if err := json.Unmarshal([]byte(getVMI(t, ctx, ns, "vm1").GetAnnotations()[kubevirt.FailureAnnotation]), &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Reason) > 1024 || !strings.HasSuffix(f.Reason, "…") {
		t.Errorf("annotation reason: %d bytes, ends %q", len(f.Reason), f.Reason[len(f.Reason)-6:])
	}
	evs := postCopyEvents(t, ctx, ns, "vm1")
	if len(evs) != 1 || len(evs[0].Message) > 1024 || !strings.HasSuffix(evs[0].Message, "…") {
		t.Fatalf("events %d, message %d bytes", len(evs), len(evs[0].Message))
	}
}
