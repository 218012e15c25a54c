//go:build kube

package kubeapi_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestServiceAccountLeastPrivilege checks the RBAC that Ferry's node agent needs: read
// VMIs, patch their status, nothing else.
func TestServiceAccountLeastPrivilege(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "rbac")
	newVMI(t, ctx, ns, "vm1")
	other := newNamespace(t, ctx, "rbac-other")
	newVMI(t, ctx, other, "vm2")

	core, rbac := srv.Clientset.CoreV1(), srv.Clientset.RbacV1()
	if _, err := core.ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ferry-handler"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := "ferry-handler-" + ns
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances/status"}, Verbs: []string{"patch"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "ferry-handler"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	token, err := srv.ServiceAccountToken(ctx, ns, "ferry-handler", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "handler.kubeconfig")
	if err := srv.KubeconfigForToken(kubeconfig, token); err != nil {
		t.Fatal(err)
	}
	// Loaded the way Ferry and kubectl load one, to check the file itself.
	tokenConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	handler := dynamic.NewForConfigOrDie(tokenConfig).Resource(kubeapi.VMIResource)

	statusPatch := []byte(`{"status":{"phase":"Failed","evacuationNodeName":"node-a"}}`)
	// The authorizer sees the new binding through an informer, a moment later.
	eventually(t, ctx, "status patch by the ServiceAccount", func() error {
		_, err := handler.Namespace(ns).Patch(ctx, "vm1", types.MergePatchType, statusPatch, metav1.PatchOptions{}, "status")
		return err
	})
	got, err := srv.Dynamic.Resource(kubeapi.VMIResource).Namespace(ns).Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Object["status"].(map[string]any)["evacuationNodeName"] != "node-a" {
		t.Errorf("status after the ServiceAccount's patch: %v", got.Object["status"])
	}
	// A ClusterRoleBinding: VMIs in every namespace.
	if list, err := handler.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) < 2 {
		t.Errorf("list VMIs in all namespaces: %v (err %v)", list, err)
	}
	if _, err := handler.Namespace(other).Patch(ctx, "vm2", types.MergePatchType, statusPatch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("status patch in another namespace: %v", err)
	}

	forbidden := map[string]error{}
	_, forbidden["patch spec"] = handler.Namespace(ns).Patch(ctx, "vm1", types.MergePatchType, []byte(`{"spec":{"evictionStrategy":"None"}}`), metav1.PatchOptions{})
	forbidden["delete"] = handler.Namespace(ns).Delete(ctx, "vm1", metav1.DeleteOptions{})
	_, forbidden["update status"] = handler.Namespace(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: err = %v, want 403 Forbidden", what, err)
		}
	}

	// A static token authenticates (403, not 401) but has no grants.
	viewer := dynamic.NewForConfigOrDie(&rest.Config{
		Host: srv.URL, BearerToken: viewerToken, TLSClientConfig: rest.TLSClientConfig{CAData: srv.CAData},
	}).Resource(kubeapi.VMIResource)
	if _, err := viewer.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("static token without RBAC: err = %v, want 403 Forbidden", err)
	}
}
