//go:build kube

package kubeapi_test

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestAPIServerRestartKeepsVMI(t *testing.T) {
	ctx := kubeapi.Context(t, 2*time.Minute)
	ns := srv.Namespace(t, ctx, "restart")
	before := newVMI(t, ctx, ns, "vm1")
	client := srv.Dynamic.Resource(kubeapi.VMIResource).Namespace(ns)

	began := time.Now()
	if err := srv.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("StopAPIServer took %s", time.Since(began).Round(time.Millisecond))
	if _, apiserver := srv.PIDs(); apiserver != 0 {
		t.Errorf("kube-apiserver pid %d still running after StopAPIServer", apiserver)
	}
	if _, err := client.Get(ctx, "vm1", metav1.GetOptions{}); err == nil {
		t.Error("Get succeeded with kube-apiserver stopped")
	} else {
		t.Logf("with kube-apiserver stopped: %v", err)
	}

	began = time.Now()
	if err := srv.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("StartAPIServer took %s", time.Since(began).Round(time.Millisecond))

	after, err := client.Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetUID() != before.GetUID() || after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("VMI changed across the restart: uid %s -> %s, resourceVersion %s -> %s",
			before.GetUID(), after.GetUID(), before.GetResourceVersion(), after.GetResourceVersion())
	}
	b, _, _ := unstructured.NestedMap(before.Object, "status")
	a, _, _ := unstructured.NestedMap(after.Object, "status")
	if !jsonEqual(a, b) {
		t.Errorf("status changed across the restart: %v -> %v", b, a)
	}
}
