package kubeapi

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ferry-vm/ferry/migration/kubevirt"
)

// Eventually retries f every 100 ms until it returns nil or ctx ends, for
// state the API server applies asynchronously (RBAC caches, event sinks,
// informers); it fails the test with f's last error.
func Eventually(t testing.TB, ctx context.Context, what string, f func() error) {
	t.Helper()
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Context is a context for one test, cancelled when it ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Namespace creates a namespace for one test. Nothing deletes it: without a
// controller manager a deleted namespace would stay Terminating anyway.
func (s *Server) Namespace(t testing.TB, ctx context.Context, prefix string) string {
	t.Helper()
	ns, err := s.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// MigratingVMI is a VMI as KubeVirt leaves it in the middle of a migration
// from node from to node to in mode (PreCopy, PostCopy): labelled with both
// nodes, running, live-migratable, its migrationState filled in.
func MigratingVMI(name, from, to, mode string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name, "labels": map[string]any{
			kubevirt.NodeLabel: from, kubevirt.TargetNodeLabel: to}},
		"spec": map[string]any{"domain": map[string]any{"devices": map[string]any{}}},
		"status": map[string]any{
			"phase": "Running", "nodeName": from,
			"conditions": []any{
				map[string]any{"type": "Ready", "status": "True"},
				map[string]any{"type": "LiveMigratable", "status": "True"},
			},
			"migrationState": map[string]any{"sourceNode": from, "targetNode": to, "migrationUid": "mig-" + name, "mode": mode},
		},
	}}
}
