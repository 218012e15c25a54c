//go:build kube

package ferryd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-vm/ferry/daemon"
	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

// TestPeerPodResolvesToItsNode: a proxy certificate that names a ferryd
// pod names the node the API server says it runs on, read with deploy/'s
// ServiceAccount; a pod that is not ferryd's, or of another namespace,
// names no node.
func TestPeerPodResolvesToItsNode(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	pod := func(name, component, node string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ferry-system",
				Labels: map[string]string{"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": component}},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "ferry", AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "c", Image: "ferryd"}}},
		}
		if _, err := srv.Clientset.CoreV1().Pods("ferry-system").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			srv.Clientset.CoreV1().Pods("ferry-system").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
	}
	// The proxy's own Role, which deploy/'s KubeVirt DaemonSet leaves out.
	rbac, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "proxy", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(ctx, rbac, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rb := srv.Clientset.RbacV1()
		rb.RoleBindings("ferry-system").Delete(context.Background(), "ferry-peer-pods", metav1.DeleteOptions{})
		rb.Roles("ferry-system").Delete(context.Background(), "ferry-peer-pods", metav1.DeleteOptions{})
	})
	pod("ferryd-peer1", "ferryd", "kvm-7")
	pod("impostor", "web", "kvm-8")
	core, err := kubernetes.NewForConfig(ferryConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := daemon.NewPodNodes(core, "ferry-system")
	node, err := r.Resolve(ctx, "ferry-system", "ferryd-peer1")
	if err != nil || node != "kvm-7" {
		t.Fatalf("ferryd-peer1 resolves to %q, %v; want kvm-7", node, err)
	}
	for _, c := range []struct{ ns, pod, want string }{
		{"ferry-system", "impostor", "not a ferryd pod"},
		{"default", "ferryd-peer1", "not in ferryd's namespace"},
		{"ferry-system", "gone", "not found"},
	} {
		if node, err := r.Resolve(ctx, c.ns, c.pod); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s/%s resolves to %q, %v; want an error saying %q", c.ns, c.pod, node, err, c.want)
		}
	}
}
