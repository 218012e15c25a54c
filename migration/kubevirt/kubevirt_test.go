package kubevirt

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func vmiWith(conds ...map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "vm1", "namespace": "default", "resourceVersion": "42", "uid": "u-1"},
		"status":   map[string]any{"phase": "Running", "migrationState": map[string]any{"sourceNode": "a", "targetNode": "b", "endTimestamp": ""}},
	}}
	var cs []any
	for _, c := range conds {
		cs = append(cs, c)
	}
	if cs != nil {
		unstructured.SetNestedSlice(u.Object, cs, "status", "conditions")
	}
	return u
}

func TestIrrecoverablePatchKeepsOthersAndIsIdempotent(t *testing.T) {
	ready := map[string]any{"type": "Ready", "status": "False", "reason": "Paused"}
	live := map[string]any{"type": "LiveMigratable", "status": "True"}
	m := &Mark{Namespace: "default", Name: "vm1", Message: "post-copy failed on a"}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	b, done, err := irrecoverablePatch(vmiWith(ready, live), m, true, now)
	if err != nil || done {
		t.Fatalf("patch: done=%v err=%v", done, err)
	}
	var p struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Status struct {
			Phase          string           `json:"phase"`
			Conditions     []map[string]any `json:"conditions"`
			MigrationState map[string]any   `json:"migrationState"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Metadata.ResourceVersion != "42" {
		t.Errorf("patch does not carry the resourceVersion it was computed from: %q", p.Metadata.ResourceVersion)
	}
	if len(p.Status.Conditions) != 3 || p.Status.Conditions[0]["type"] != "Ready" || p.Status.Conditions[1]["type"] != "LiveMigratable" ||
		p.Status.Conditions[2]["type"] != ConditionIrrecoverable || p.Status.Conditions[2]["reason"] != "PostCopyFailed" {
		t.Errorf("conditions %v: others must stay first, in order, ours last", p.Status.Conditions)
	}
	ms := p.Status.MigrationState
	if ms["failed"] != true || ms["failureReason"] != IrrecoverableMessage || ms["mode"] != "PostCopy" ||
		ms["endTimestamp"] != "2026-11-29T12:00:00Z" || ms["sourceNode"] != "a" || p.Status.Phase != "Failed" {
		t.Errorf("migrationState %v phase %q", ms, p.Status.Phase)
	}
	marked := map[string]any{"type": ConditionIrrecoverable, "status": "True"}
	if _, done, _ := irrecoverablePatch(vmiWith(ready, marked), m, true, now); !done {
		t.Error("a VMI already marked must not be patched again")
	}
	b, _, _ = irrecoverablePatch(vmiWith(), m, false, now)
	p.Status.Phase = ""
	if json.Unmarshal(b, &p); p.Status.Phase != "" {
		t.Errorf("--mark-phase-failed=false still set phase %q", p.Status.Phase)
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
}
