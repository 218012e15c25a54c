package kubevirt

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ferry-vm/ferry/api"
)

func vmi(labels map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": "vm1", "namespace": "default", "resourceVersion": "42", "uid": "u-1"}
	if labels != nil {
		meta["labels"] = labels
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": meta,
		"status": map[string]any{"phase": "Running", "migrationState": map[string]any{"sourceNode": "a", "targetNode": "b", "migrationUid": "mig-1"}},
	}}
}

func TestIrrecoverablePatchTouchesMetadataOnlyAndIsIdempotent(t *testing.T) {
	m := &Mark{Namespace: "default", Name: "vm1", Node: "b", Role: "target", Detected: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Reason: "connection reset", RemainingBytes: 1 << 20, PostCopyRequests: 7}
	b, done, err := irrecoverablePatch(vmi(map[string]any{NodeLabel: "a"}), m)
	if err != nil || done {
		t.Fatalf("patch: done=%v err=%v", done, err)
	}
	var p map[string]map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p["metadata"] == nil {
		t.Fatalf("patch %s: only metadata may change (virt-api reverts status for others)", b)
	}
	md := p["metadata"]
	if md["resourceVersion"] != "42" {
		t.Errorf("patch does not carry the resourceVersion it was computed from: %v", md["resourceVersion"])
	}
	if l, _ := md["labels"].(map[string]any); len(l) != 1 || l[IrrecoverableLabel] != "true" {
		t.Errorf("labels %v: ours alone (a merge patch keeps the others)", l)
	}
	ann, _ := md["annotations"].(map[string]any)
	var f Failure
	if err := json.Unmarshal([]byte(ann[FailureAnnotation].(string)), &f); err != nil {
		t.Fatal(err)
	}
	want := Failure{Side: "target", Node: "b", Detected: m.Detected, MigrationUID: "mig-1", Message: IrrecoverableMessage,
		Reason: "connection reset", RemainingBytes: 1 << 20, PostCopyRequests: 7}
	if f != want {
		t.Errorf("annotation %+v, want %+v", f, want)
	}
	if _, done, _ := irrecoverablePatch(vmi(map[string]any{IrrecoverableLabel: "true"}), m); !done {
		t.Error("a VMI already marked must not be patched again")
	}
	landed := vmi(map[string]any{IrrecoverableLabel: "true"})
	landed.SetAnnotations(map[string]string{FailureAnnotation: ann[FailureAnnotation].(string)})
	if !markedBy(landed, m) {
		t.Error("our own landed patch is not recognised: its Event would never be sent")
	}
	other := *m
	other.Node, other.Role = "a", "source"
	if markedBy(landed, &other) {
		t.Error("the other node's mark is taken for ours: two Events")
	}
	if !infoFrom(vmi(map[string]any{IrrecoverableLabel: "true"})).Irrecoverable {
		t.Error("the label does not show as irrecoverable")
	}
}

func TestStoreKeepsMarksAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	s, err := newStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := Mark{ID: "irrecoverable_default_vm1_1", Kind: KindIrrecoverable, Namespace: "default", Name: "vm1", Detected: time.Unix(1, 0), Patched: true}
	if err := s.save(m); err != nil {
		t.Fatal(err)
	}
	again, _ := newStore(dir)
	got, errs := again.load()
	if len(errs) > 0 || len(got) != 1 || got[0].ID != m.ID || !got[0].Patched {
		t.Fatalf("loaded %+v, errors %v", got, errs)
	}
	if err := again.remove(m.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := again.load(); len(got) != 0 {
		t.Fatalf("removed mark came back: %+v", got)
	}
}

func TestALongVMINameStillNamesAFile(t *testing.T) {
	s, err := newStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := Mark{Kind: KindIrrecoverable, Namespace: strings.Repeat("n", 63), Name: strings.Repeat("v", 253), Detected: time.Unix(1, 0)}
	m.ID = markID(m)
	if err := s.save(m); err != nil {
		t.Fatalf("a mark for the longest VMI name: %v", err)
	}
	if got, errs := s.load(); len(got) != 1 || len(errs) > 0 {
		t.Fatalf("loaded %v, %v", got, errs)
	}
}

func TestMarkValidation(t *testing.T) {
	if err := (Mark{Kind: KindEvent, Namespace: "ns", Name: "n", EventType: "Bad", EventReason: "X"}).validate(); err == nil {
		t.Error("event type Bad accepted")
	}
	if err := (Mark{Kind: "shout", Namespace: "ns", Name: "n"}).validate(); err == nil {
		t.Error("unknown kind accepted")
	}
	if err := (Mark{Kind: KindIrrecoverable, Name: "n"}).validate(); err == nil {
		t.Error("missing namespace accepted")
	}
	// A domain served by any pod names the mark's file: no path may come of it.
	for _, m := range []Mark{
		{Kind: KindIrrecoverable, Namespace: "/../../../../../etc/cni/net.d/00-x", Name: "vm"},
		{Kind: KindIrrecoverable, Namespace: "default", Name: "../../x"},
		{Kind: KindIrrecoverable, Namespace: "default", Name: "a/b"},
	} {
		if err := m.validate(); err == nil {
			t.Errorf("mark for %q/%q accepted", m.Namespace, m.Name)
		}
	}
	s, err := newStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.save(Mark{ID: "irrecoverable_/../../../../../etc/cni/net.d/00-x_vm_1"}); err == nil {
		t.Error("the store wrote a mark whose ID is a path")
	}
}

func TestPodUIDFromSocket(t *testing.T) {
	pods := "/var/lib/kubelet/pods"
	for socket, want := range map[string]string{
		pods + "/1b2c/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock": "1b2c",
		pods + "//1b2c/./x":                "1b2c",
		pods + "/../pods2/1b2c/x":          "",
		pods + "/1b2c":                     "",
		"/run/libvirt/libvirt-sock":        "",
		"/var/lib/kubelet/podsX/1b2c/sock": "",
		"":                                 "",
	} {
		if got := PodOfSocket(pods, socket); got != want {
			t.Errorf("PodOfSocket(%q) = %q, want %q", socket, got, want)
		}
	}
	if got := PodOfSocket("", pods+"/1b2c/x"); got != "" {
		t.Errorf("no pods dir: %q", got)
	}
}

func TestOnlyItsOwnPodsSocketServesAVMI(t *testing.T) {
	pods := "/var/lib/kubelet/pods"
	vmi := &api.VMIInfo{ActivePods: map[string]string{"1b2c": "node-a"}}
	for socket, want := range map[string]bool{
		pods + "/1b2c/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock": true,
		pods + "/9f9f/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock": false,
		"/run/libvirt/libvirt-sock": true,
	} {
		if got := SocketOfVMI(pods, socket, vmi); got != want {
			t.Errorf("SocketOfVMI(%q) = %v, want %v", socket, got, want)
		}
	}
}

func TestCapText(t *testing.T) {
	if s := strings.Repeat("a", maxText); capText(s) != s {
		t.Error("a text at the limit was cut")
	}
	for _, s := range []string{strings.Repeat("a", 5000), strings.Repeat("é", 700), "x" + strings.Repeat("€", 500)} {
		c := capText(s)
		if len(c) > maxText || !strings.HasSuffix(c, "…") || !utf8.ValidString(c) || !strings.HasPrefix(s, strings.TrimSuffix(c, "…")) {
			t.Errorf("capText of %d bytes: %d bytes, valid %v", len(s), len(c), utf8.ValidString(c))
		}
	}
}
