//go:build kube

package ferryd_test

import (
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

type access struct {
	verb, group, resource, subresource, namespace string
}

// TestDeployRBACIsExactlyFerrydsJob asks the authorizer, for deploy/'s ServiceAccount
// bound by deploy/rbac.yaml, about every call ferryd makes and a wide list it must
// not. The ClusterRole is bound cluster-wide because VMIs, and so the Events about
// them, live in any namespace: VMI reads, patches and Event creation are allowed in
// every namespace, by design.
func TestDeployRBACIsExactlyFerrydsJob(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	allowed := []access{}
	for _, ns := range []string{"", "default", "tenant-a"} {
		for _, v := range []string{"get", "list", "watch", "patch"} {
			allowed = append(allowed, access{v, "kubevirt.io", "virtualmachineinstances", "", ns})
		}
		if ns != "" {
			allowed = append(allowed, access{"create", "", "events", "", ns})
		}
		// The plan's KubeVirt advice: the KubeVirt CR, wherever it is installed.
		for _, v := range []string{"get", "list", "watch"} {
			allowed = append(allowed, access{v, "kubevirt.io", "kubevirts", "", ns})
		}
	}
	for _, v := range []string{"get", "list", "watch"} {
		allowed = append(allowed, access{v, "migrations.kubevirt.io", "migrationpolicies", "", ""},
			access{v, "", "namespaces", "", ""})
	}
	// The proxy is off on KubeVirt nodes, so no peer's pod is looked up.
	refused := []access{
		{"get", "", "pods", "", "ferry-system"}, {"list", "", "pods", "", "ferry-system"}, {"watch", "", "pods", "", "ferry-system"}, {"get", "", "pods", "", ""},
		{"get", "", "secrets", "", "ferry-system"}, {"list", "", "secrets", "", ""}, {"get", "", "secrets", "", "default"},
		{"get", "", "pods", "", "default"}, {"list", "", "pods", "", ""}, {"create", "", "pods", "", "default"},
		{"delete", "", "pods", "", "default"}, {"create", "", "pods", "exec", "default"}, {"create", "", "pods", "eviction", "default"},
		{"delete", "kubevirt.io", "virtualmachineinstances", "", "default"},
		{"deletecollection", "kubevirt.io", "virtualmachineinstances", "", "default"},
		{"create", "kubevirt.io", "virtualmachineinstances", "", "default"},
		{"update", "kubevirt.io", "virtualmachineinstances", "", "default"},
		{"patch", "kubevirt.io", "virtualmachineinstances", "status", "default"},
		{"update", "kubevirt.io", "virtualmachineinstances", "status", "default"},
		{"patch", "kubevirt.io", "virtualmachines", "", "default"}, {"get", "kubevirt.io", "virtualmachines", "", "default"},
		{"create", "kubevirt.io", "virtualmachineinstancemigrations", "", "default"},
		{"get", "", "nodes", "", ""}, {"patch", "", "nodes", "", ""}, {"list", "", "nodes", "", ""},
		{"get", "", "configmaps", "", "default"}, {"create", "", "configmaps", "", "default"},
		{"patch", "", "events", "", "default"}, {"update", "", "events", "", "default"}, {"delete", "", "events", "", "default"},
		{"list", "", "events", "", "default"},
		{"create", "", "serviceaccounts", "token", "ferry-system"},
		{"patch", "apps", "daemonsets", "", "ferry-system"},
		{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""},
		{"create", "events.k8s.io", "events", "", "default"},
		// KubeVirt's configuration is read, never changed.
		{"create", "kubevirt.io", "kubevirts", "", "kubevirt"}, {"patch", "kubevirt.io", "kubevirts", "", "kubevirt"},
		{"update", "kubevirt.io", "kubevirts", "", "kubevirt"}, {"delete", "kubevirt.io", "kubevirts", "", "kubevirt"},
		{"patch", "kubevirt.io", "kubevirts", "status", "kubevirt"},
		{"create", "migrations.kubevirt.io", "migrationpolicies", "", ""}, {"patch", "migrations.kubevirt.io", "migrationpolicies", "", ""},
		{"delete", "migrations.kubevirt.io", "migrationpolicies", "", ""},
		{"patch", "", "namespaces", "", ""}, {"update", "", "namespaces", "", ""}, {"delete", "", "namespaces", "", ""},
		{"create", "", "namespaces", "", ""},
	}
	check := func(a access, want bool) {
		sar, err := srv.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   ferryUser,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ferry-system", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != want {
			t.Errorf("%+v: allowed = %v, want %v (%s)", a, sar.Status.Allowed, want, sar.Status.Reason)
		}
	}
	for _, a := range allowed {
		check(a, true)
	}
	for _, a := range refused {
		check(a, false)
	}
}

// A status write by Ferry's ServiceAccount does not stick: RBAC refuses the /status
// subresource, and virt-api's rule the status on the main resource. Nor does any
// other change but Ferry's own label and annotation.
func TestFerryMayChangeOnlyItsOwnMark(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "status-write")
	before := migratingVMI(t, ctx, ns, "vm1")
	ferry := dynamic.NewForConfigOrDie(ferryConfig()).Resource(kubevirt.VMIResource).Namespace(ns)
	body := []byte(`{"status":{"phase":"Failed"}}`)
	if _, err := ferry.Patch(ctx, "vm1", types.MergePatchType, body, metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
		t.Errorf("patch on /status: err = %v, want 403 or 404", err)
	}
	if _, err := ferry.Patch(ctx, "vm1", types.MergePatchType, body, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("status in a patch of the VMI: err = %v, want 403", err)
	}
	if _, err := ferry.Patch(ctx, "vm1", types.MergePatchType, []byte(`{"metadata":{"labels":{"kubevirt.io/nodeName":"node-b"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a kubevirt.io/ label: err = %v, want 403", err)
	}
	if after := getVMI(t, ctx, ns, "vm1"); !equalJSON(after.Object["status"], before.Object["status"]) || after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("VMI changed: %v", after.Object)
	}
	// deploy/admission.yaml: what virt-api would let anyone change, but
	// ferryd has no business with.
	for what, body := range map[string]string{
		"another's label":      `{"metadata":{"labels":{"example.com/team":"other"}}}`,
		"removing a label":     `{"metadata":{"labels":{"example.com/team":null}}}`,
		"another's annotation": `{"metadata":{"annotations":{"example.com/note":"x"}}}`,
		"a finalizer":          `{"metadata":{"finalizers":["example.com/keep"]}}`,
		"the spec":             `{"spec":{"terminationGracePeriodSeconds":5}}`,
	} {
		if _, err := ferry.Patch(ctx, "vm1", types.MergePatchType, []byte(body), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s by ferryd: err = %v, want 403 from deploy/admission.yaml", what, err)
		}
	}
	if after := getVMI(t, ctx, ns, "vm1"); after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("VMI changed: %v", after.Object)
	}
	if _, err := ferry.Patch(ctx, "vm1", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+kubevirt.IrrecoverableLabel+`":"true"},"annotations":{"`+kubevirt.FailureAnnotation+`":"{}"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("Ferry's own label and annotation: %v", err)
	}
}
