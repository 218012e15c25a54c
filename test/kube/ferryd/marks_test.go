//go:build kube

package ferryd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-vm/ferry/migration/kubevirt"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

// reporter is one node's ferryd reporting side, as ferryd builds it, authenticated as
// deploy/'s ServiceAccount; stateDir plays the node's --state-dir.
func reporter(t *testing.T, node, stateDir string) *kubevirt.Reporter {
	t.Helper()
	rc := ferryConfig()
	r, err := kubevirt.NewReporter(kubevirt.ReporterConfig{
		Node: node, StateDir: stateDir,
		Dynamic: dynamic.NewForConfigOrDie(rc), Core: kubernetes.NewForConfigOrDie(rc),
		Log: zaptest.NewLogger(t).Named(node),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// postCopyMark carries the VMI's UID, as the domain's KubeVirt metadata
// gives it, when the VMI exists.
func postCopyMark(ns, name, node, side string) kubevirt.Mark {
	var uid string
	if u, err := srv.Dynamic.Resource(kubevirt.VMIResource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
		uid = string(u.GetUID())
	}
	return kubevirt.Mark{
		Kind: kubevirt.KindIrrecoverable, Namespace: ns, Name: name, Node: node, Role: side, UID: uid,
		Detected: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC),
		Message:  kubevirt.IrrecoverableMessage + ": post-copy migration failed, seen on node " + node,
		Reason:   "connection reset by peer", RemainingBytes: 3 << 28, PostCopyRequests: 41,
	}
}

// runUntilDone runs reporters until none has a mark pending.
func runUntilDone(t *testing.T, ctx context.Context, reps ...*kubevirt.Reporter) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(rctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	kubeapi.Eventually(t, ctx, "marks delivered", func() error {
		for _, r := range reps {
			if p := r.Pending(); len(p) > 0 {
				return fmt.Errorf("%d pending, e.g. %+v", len(p), p[0])
			}
		}
		return nil
	})
}

// postCopyEvents returns the PostCopyFailed Events of a VMI.
func postCopyEvents(t *testing.T, ctx context.Context, ns, name string) []corev1.Event {
	t.Helper()
	evs, err := srv.Clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=PostCopyFailed"})
	if err != nil {
		t.Fatal(err)
	}
	return evs.Items
}

// checkMarkedOnce checks that of two nodes reporting the same post-copy
// failure (a on node-a, the source; b on node-b) one marked the VMI and the
// other found it marked, and that the mark is whole; it returns the side
// and node whose mark landed.
func checkMarkedOnce(t *testing.T, ctx context.Context, a, b *kubevirt.Reporter, before *unstructured.Unstructured) (side, node string) {
	t.Helper()
	da, db := a.Delivered(), b.Delivered()
	if da["marked"]+db["marked"] != 1 || da["already_marked"]+db["already_marked"] != 1 {
		t.Errorf("outcomes: node-a %v, node-b %v; want one marked, one already_marked", da, db)
	}
	side, node = "source", "node-a"
	if db["marked"] == 1 {
		side, node = "target", "node-b"
	}
	checkMarked(t, ctx, before, side, node)
	return side, node
}

// checkMarked checks the whole of a mark: Ferry's label and annotation, one Event,
// and nothing of KubeVirt's (status, kubevirt.io/ labels) or of others' changed.
func checkMarked(t *testing.T, ctx context.Context, before *unstructured.Unstructured, side, node string) {
	t.Helper()
	ns, name := before.GetNamespace(), before.GetName()
	after := getVMI(t, ctx, ns, name)
	if after.GetLabels()[kubevirt.IrrecoverableLabel] != "true" {
		t.Errorf("label %s missing: %v", kubevirt.IrrecoverableLabel, after.GetLabels())
	}
	var f kubevirt.Failure
	if err := json.Unmarshal([]byte(after.GetAnnotations()[kubevirt.FailureAnnotation]), &f); err != nil {
		t.Errorf("annotation %s: %v (%q)", kubevirt.FailureAnnotation, err, after.GetAnnotations()[kubevirt.FailureAnnotation])
	}
	if f.Side != side || f.Node != node || f.MigrationUID != "mig-"+name || f.Message != kubevirt.IrrecoverableMessage ||
		f.Reason != "connection reset by peer" || f.RemainingBytes != 3<<28 || f.PostCopyRequests != 41 || f.Detected.IsZero() {
		t.Errorf("annotation %+v", f)
	}
	if !equalJSON(after.Object["status"], before.Object["status"]) {
		t.Errorf("status changed:\nbefore %v\nafter  %v", before.Object["status"], after.Object["status"])
	}
	for k, v := range before.GetLabels() {
		if after.GetLabels()[k] != v {
			t.Errorf("label %s: %q -> %q", k, v, after.GetLabels()[k])
		}
	}
	if len(after.GetLabels()) != len(before.GetLabels())+1 {
		t.Errorf("labels %v: only %s may be added", after.GetLabels(), kubevirt.IrrecoverableLabel)
	}
	evs := postCopyEvents(t, ctx, ns, name)
	if len(evs) != 1 {
		t.Fatalf("%d PostCopyFailed Events, want exactly one: %+v", len(evs), evs)
	}
	e := evs[0]
	if e.Type != corev1.EventTypeWarning || !strings.HasPrefix(e.Message, kubevirt.IrrecoverableMessage) ||
		e.InvolvedObject.UID != before.GetUID() || e.ReportingController != "ferry" || e.Count != 1 {
		t.Errorf("Event %+v", e)
	}
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Both nodes' ferryds see the failure (the source paused, the target running
// post-copy-failed) and report it at once: one label, one annotation, one Event.
func TestPostCopyFailureMarkedOnceByBothNodes(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "marks")
	before := migratingVMI(t, ctx, ns, "vm1")
	a, b := reporter(t, "node-a", t.TempDir()), reporter(t, "node-b", t.TempDir())
	if err := a.Report(postCopyMark(ns, "vm1", "node-a", "source")); err != nil {
		t.Fatal(err)
	}
	if err := b.Report(postCopyMark(ns, "vm1", "node-b", "target")); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, ctx, a, b)

	side, node := checkMarkedOnce(t, ctx, a, b, before)

	// A later detection (ferryd seeing the domain again) changes nothing.
	again := reporter(t, "node-b", t.TempDir())
	later := postCopyMark(ns, "vm1", "node-b", "target")
	later.Detected = later.Detected.Add(time.Minute)
	again.Report(later)
	runUntilDone(t, ctx, again)
	if d := again.Delivered(); d["already_marked"] != 1 {
		t.Errorf("second report: %v, want already_marked", d)
	}
	checkMarked(t, ctx, before, side, node)
}

// The second node's ferryd comes after the mark landed: no second Event.
func TestSecondNodeAddsNoEvent(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "marks-seq")
	before := migratingVMI(t, ctx, ns, "vm1")
	b := reporter(t, "node-b", t.TempDir())
	b.Report(postCopyMark(ns, "vm1", "node-b", "target"))
	runUntilDone(t, ctx, b)
	a := reporter(t, "node-a", t.TempDir())
	a.Report(postCopyMark(ns, "vm1", "node-a", "source"))
	runUntilDone(t, ctx, a)
	if b.Delivered()["marked"] != 1 || a.Delivered()["already_marked"] != 1 {
		t.Errorf("outcomes: node-b %v, node-a %v", b.Delivered(), a.Delivered())
	}
	checkMarked(t, ctx, before, "target", "node-b")
}

// A mark whose domain names another VMI's UID is dropped, and so is one for a
// domain without KubeVirt metadata (no UID): a VMI is never marked by name alone.
func TestMarkChecksTheUIDWhenKnown(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "marks-uid")
	before := migratingVMI(t, ctx, ns, "vm1")
	r := reporter(t, "node-a", t.TempDir())
	m := postCopyMark(ns, "vm1", "node-a", "source")
	for _, c := range []struct{ uid, outcome string }{
		{"00000000-0000-4000-8000-00000000dead", "uid_mismatch"}, // a VMI of another UID
		{"", "no_vmi_uid"}, // by name alone
	} {
		m.UID = c.uid
		m.Detected = m.Detected.Add(time.Second)
		r.Report(m)
		runUntilDone(t, ctx, r)
		if d := r.Delivered(); d[c.outcome] != 1 {
			t.Errorf("domain UID %q: outcomes %v, want %s", c.uid, d, c.outcome)
		}
		if l := getVMI(t, ctx, ns, "vm1").GetLabels(); l[kubevirt.IrrecoverableLabel] != "" {
			t.Errorf("domain UID %q: the VMI was marked: %v", c.uid, l)
		}
	}
	m.UID = string(before.GetUID())
	m.Detected = m.Detected.Add(time.Second)
	r.Report(m)
	runUntilDone(t, ctx, r)
	checkMarked(t, ctx, before, "source", "node-a")
}

// The API server applied a node's patch, or its Event, but the answer was lost
// (a timeout): the retry still records the Event, and only once.
func TestLostAnswersNeitherLoseNorRepeatTheEvent(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "marks-lost")
	before := migratingVMI(t, ctx, ns, "vm1")
	m := postCopyMark(ns, "vm1", "node-a", "source")
	// The patch that landed unanswered: node-a's own label and annotation.
	f, _ := json.Marshal(kubevirt.Failure{Side: "source", Node: "node-a", Detected: m.Detected, MigrationUID: "mig-vm1",
		Message: kubevirt.IrrecoverableMessage, Reason: m.Reason, RemainingBytes: m.RemainingBytes, PostCopyRequests: m.PostCopyRequests})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{kubevirt.IrrecoverableLabel: "true"},
		"annotations": map[string]any{kubevirt.FailureAnnotation: string(f)},
	}})
	ferry := dynamic.NewForConfigOrDie(ferryConfig()).Resource(kubevirt.VMIResource).Namespace(ns)
	if _, err := ferry.Patch(ctx, "vm1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r := reporter(t, "node-a", t.TempDir())
	r.Report(m)
	runUntilDone(t, ctx, r)
	if d := r.Delivered(); d["marked"] != 1 {
		t.Errorf("outcomes %v: the retry of a landed patch must still record the Event", d)
	}
	// The Event that landed unanswered: the same mark delivered again.
	again := reporter(t, "node-a", t.TempDir())
	again.Report(m)
	runUntilDone(t, ctx, again)
	checkMarked(t, ctx, before, "source", "node-a")
}

// A mark from a launcher socket lands only on a VMI that KubeVirt lists that
// pod for: any pod can put a socket under the kubelet's pods directory.
func TestMarkNeedsTheSocketsPodAmongTheActivePods(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "marks-pod")
	const intruder = "6f1e2d3c-0000-4000-8000-00000000bad0"
	before := migratingVMI(t, ctx, ns, "vm1")
	podsDir := "/var/lib/kubelet/pods"
	rc := ferryConfig()
	r, err := kubevirt.NewReporter(kubevirt.ReporterConfig{
		Node: "node-a", StateDir: t.TempDir(), PodsDir: podsDir,
		Dynamic: dynamic.NewForConfigOrDie(rc), Core: kubernetes.NewForConfigOrDie(rc),
		Log: zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	sock := func(pod string) string {
		return podsDir + "/" + pod + "/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock"
	}

	m := postCopyMark(ns, "vm1", "node-a", "source")
	m.Socket = sock(intruder)
	r.Report(m)
	runUntilDone(t, ctx, r)
	if d := r.Delivered(); d["pod_mismatch"] != 1 {
		t.Errorf("outcomes %v, want pod_mismatch", d)
	}
	if l := getVMI(t, ctx, ns, "vm1").GetLabels(); l[kubevirt.IrrecoverableLabel] != "" {
		t.Errorf("a socket of a pod not the VMI's marked it: %v", l)
	}
	if evs := postCopyEvents(t, ctx, ns, "vm1"); len(evs) != 0 {
		t.Errorf("a socket of a pod not the VMI's recorded %d Events", len(evs))
	}

	m.Socket = sock(targetPod)
	m.Detected = m.Detected.Add(time.Second)
	r.Report(m)
	runUntilDone(t, ctx, r)
	checkMarked(t, ctx, before, "source", "node-a")
}
