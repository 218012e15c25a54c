package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The cache logic alone (the lookup itself is tested against a real API
// server in test/kube/ferryd): refusals are not asked again at once, and a
// known node survives an API server that cannot answer.
func TestPodNodesCachesRefusalsAndSurvivesAnOutage(t *testing.T) {
	ferryd := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ferry-b", Namespace: "ferry-system",
		Labels: map[string]string{"app.kubernetes.io/component": ferrydComponent}}, Spec: corev1.PodSpec{NodeName: "b"}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ferry-system"}, Spec: corev1.PodSpec{NodeName: "c"}}
	core := fake.NewSimpleClientset(ferryd, other)
	gets := 0
	down := false
	core.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if down {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	r := NewPodNodes(core, "ferry-system")
	ctx := context.Background()

	for range 3 {
		if _, err := r.Resolve(ctx, "ferry-system", "web"); err == nil {
			t.Fatal("a pod that is no ferryd pod was placed on a node")
		}
	}
	if gets != 1 {
		t.Fatalf("%d API calls for one refused pod, want 1", gets)
	}

	if n, err := r.Resolve(ctx, "ferry-system", "ferry-b"); err != nil || n != "b" {
		t.Fatalf("ferry-b: %q, %v", n, err)
	}
	// Past the TTL with the API server down, the last known node stands.
	down = true
	r.mu.Lock()
	e := r.cache["ferry-b"]
	e.at = time.Now().Add(-2 * podNodeTTL)
	r.cache["ferry-b"] = e
	r.mu.Unlock()
	if n, err := r.Resolve(ctx, "ferry-system", "ferry-b"); err != nil || n != "b" {
		t.Fatalf("during an API outage: %q, %v; want the last known node b", n, err)
	}
	if _, err := r.Resolve(ctx, "other-ns", "ferry-b"); err == nil {
		t.Fatal("a pod of another namespace was accepted")
	}
}
