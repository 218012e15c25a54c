//go:build kube

package kubeapi_test

import (
	"testing"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func TestVMIStatusMergePatch(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "vmi-status")
	before := newVMI(t, ctx, ns, "vm1")
	client := srv.Dynamic.Resource(kubeapi.VMIResource).Namespace(ns)
	ready, _, _ := unstructured.NestedSlice(before.Object, "status", "conditions")
	if len(ready) != 1 {
		t.Fatalf("conditions after create: %v", ready)
	}

	// A JSON merge patch replaces lists whole (the CRD cannot merge by key), so adding
	// a condition means sending the ones to keep as well.
	liveMigratable := map[string]any{
		"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
		"message":            "cannot migrate VMI: PVC disk0 is not shared",
		"lastTransitionTime": "2026-11-29T10:05:00Z",
	}
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": before.GetResourceVersion()},
		"spec":     map[string]any{"evictionStrategy": "None"}, // ignored on /status
		"status": map[string]any{
			"phase":      "Running",
			"conditions": append(ready, liveMigratable),
			"migrationState": map[string]any{
				"migrationUid": "a9b7c4e2", "sourceNode": "node-a", "targetNode": "node-b",
				"startTimestamp": "2026-11-29T10:06:00Z", "mode": "PreCopy",
				// Not in the stand-in schema: kept, as the full upstream schema would.
				"targetDirectMigrationNodePorts": map[string]any{"40001": 49152},
			},
		},
	}
	if _, err := client.Patch(ctx, "vm1", types.MergePatchType, mustJSON(t, patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}

	after, err := client.Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(after.Object, "status", "conditions")
	if len(conds) != 2 || !jsonEqual(conds[0], ready[0]) || !jsonEqual(conds[1], liveMigratable) {
		t.Errorf("conditions = %v, want %v then %v", conds, ready[0], liveMigratable)
	}
	if phase, _, _ := unstructured.NestedString(after.Object, "status", "phase"); phase != "Running" {
		t.Errorf("phase = %q, want Running", phase)
	}
	if ports, _, _ := unstructured.NestedMap(after.Object, "status", "migrationState", "targetDirectMigrationNodePorts"); len(ports) != 1 {
		t.Errorf("migrationState.targetDirectMigrationNodePorts pruned: %v", after.Object["status"])
	}
	if node, _, _ := unstructured.NestedString(after.Object, "status", "nodeName"); node != "node-a" {
		t.Errorf("status.nodeName = %q, want node-a (untouched)", node)
	}
	if es, _, _ := unstructured.NestedString(after.Object, "spec", "evictionStrategy"); es != "LiveMigrate" {
		t.Errorf("spec.evictionStrategy = %q: a /status patch changed spec", es)
	}
	if l := after.GetLabels()["kubevirt.io/nodeName"]; l != "node-a" {
		t.Errorf("label kubevirt.io/nodeName = %q", l)
	}

	// The resourceVersion in the patch makes it conditional: a writer holding a stale
	// copy gets 409 instead of overwriting the conditions someone else just set.
	_, err = client.Patch(ctx, "vm1", types.MergePatchType, mustJSON(t, map[string]any{
		"metadata": map[string]any{"resourceVersion": before.GetResourceVersion()},
		"status":   map[string]any{"conditions": ready},
	}), metav1.PatchOptions{}, "status")
	if !apierrors.IsConflict(err) {
		t.Errorf("stale merge patch: err = %v, want 409 Conflict", err)
	}

	// Without the kept conditions, the merge patch drops them.
	if _, err := client.Patch(ctx, "vm1", types.MergePatchType, mustJSON(t, map[string]any{
		"status": map[string]any{"conditions": []any{liveMigratable}},
	}), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	after, err = client.Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if conds, _, _ := unstructured.NestedSlice(after.Object, "status", "conditions"); len(conds) != 1 {
		t.Errorf("conditions after a patch with one condition: %v, want that one only", conds)
	}

	// The typed fields are checked like the real CRD's.
	_, err = client.Patch(ctx, "vm1", types.MergePatchType, []byte(`{"status":{"migrationState":{"completed":"yes"}}}`), metav1.PatchOptions{}, "status")
	if !apierrors.IsInvalid(err) {
		t.Errorf("completed: \"yes\": err = %v, want 422 Invalid", err)
	}
	_, err = client.Patch(ctx, "vm1", types.MergePatchType, []byte(`{"status":{"conditions":[{"reason":"NoType"}]}}`), metav1.PatchOptions{}, "status")
	if !apierrors.IsInvalid(err) {
		t.Errorf("condition without type and status: err = %v, want 422 Invalid", err)
	}
}
