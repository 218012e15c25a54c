//go:build kube

package kubeapi_test

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// TestVMIContract checks that the test API server holds VMIs to a real cluster's
// contract: KubeVirt's CRD (no status subresource, a typed status) and virt-api's
// rules (status and kubevirt.io/ labels are KubeVirt's; other labels, annotations are
// open).
func TestVMIContract(t *testing.T) {
	ctx := kubeapi.Context(t, 2*time.Minute)
	ns := srv.Namespace(t, ctx, "vmi-contract")
	before := newVMI(t, ctx, ns, "vm1")
	admin := srv.Dynamic.Resource(kubeapi.VMIResource).Namespace(ns)
	kubevirt := dynamic.NewForConfigOrDie(srv.KubeVirtConfig()).Resource(kubeapi.VMIResource).Namespace(ns)
	patch := func(c dynamic.ResourceInterface, body string, sub ...string) error {
		_, err := c.Patch(ctx, "vm1", types.MergePatchType, []byte(body), metav1.PatchOptions{}, sub...)
		return err
	}

	if err := patch(admin, `{"status":{"phase":"Failed"}}`, "status"); !apierrors.IsNotFound(err) {
		t.Errorf("patch on /status: err = %v, want 404 (KubeVirt's CRD has no status subresource)", err)
	}
	if err := patch(admin, `{"status":{"phase":"Failed"}}`); !apierrors.IsForbidden(err) {
		t.Errorf("status change by the admin: err = %v, want 403 (virt-api reverts it)", err)
	}
	for what, body := range map[string]string{
		"adding":   `{"metadata":{"labels":{"kubevirt.io/migrationTargetNodeName":"node-b"}}}`,
		"changing": `{"metadata":{"labels":{"kubevirt.io/nodeName":"node-b"}}}`,
		"removing": `{"metadata":{"labels":{"kubevirt.io/nodeName":null}}}`,
	} {
		if err := patch(admin, body); !apierrors.IsForbidden(err) {
			t.Errorf("%s a kubevirt.io/ label by the admin: err = %v, want 403", what, err)
		}
	}
	if err := patch(admin, `{"metadata":{"labels":{"example.com/team":"a"},"annotations":{"example.com/why":"test"}}}`); err != nil {
		t.Errorf("own label and annotation by the admin: %v", err)
	}

	// KubeVirt itself may do all of it; unknown status fields are pruned, known ones kept.
	if err := patch(kubevirt, `{"metadata":{"labels":{"kubevirt.io/migrationTargetNodeName":"node-b"}},
		"status":{"phase":"Running","bogus":1,"migrationState":{"migrationUid":"m-1","targetDirectMigrationNodePorts":{"40001":49152}}}}`); err != nil {
		t.Fatalf("KubeVirt's own change: %v", err)
	}
	after, err := admin.Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(after.Object, "status", "phase"); phase != "Running" {
		t.Errorf("phase = %q after KubeVirt set Running", phase)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(after.Object, "status", "bogus"); found {
		t.Error("an unknown status field was kept: the status is not typed")
	}
	if ports, _, _ := unstructured.NestedMap(after.Object, "status", "migrationState", "targetDirectMigrationNodePorts"); len(ports) != 1 {
		t.Errorf("migrationState.targetDirectMigrationNodePorts pruned: %v", after.Object["status"])
	}
	if l := after.GetLabels(); l["kubevirt.io/nodeName"] != "node-a" || l["kubevirt.io/migrationTargetNodeName"] != "node-b" || l["example.com/team"] != "a" {
		t.Errorf("labels = %v", l)
	}

	// The resourceVersion in a merge patch makes it conditional.
	stale := `{"metadata":{"resourceVersion":"` + before.GetResourceVersion() + `","labels":{"example.com/team":"b"}}}`
	if err := patch(admin, stale); !apierrors.IsConflict(err) {
		t.Errorf("stale merge patch: err = %v, want 409 Conflict", err)
	}
	// Typed like the real CRD.
	if err := patch(kubevirt, `{"status":{"migrationState":{"completed":"yes"}}}`); !apierrors.IsInvalid(err) {
		t.Errorf("completed: \"yes\": err = %v, want 422 Invalid", err)
	}
}
