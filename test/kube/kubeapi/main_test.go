//go:build kube

package kubeapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// srv is shared by all tests: one API server per run keeps the run short and installs
// the CRD once.
var srv *kubeapi.Server

const viewerToken = "viewer-static-token"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Generous: a cold build of kube-apiserver takes minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	// Built separately so that the Start time below is the start alone.
	began := time.Now()
	if _, _, err := kubeapi.Build(ctx, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi: build:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "kubeapi: Build took %s\n", time.Since(began).Round(time.Millisecond))

	began = time.Now()
	s, err := kubeapi.Start(ctx, kubeapi.Options{
		Log:          os.Stderr,
		StaticTokens: []kubeapi.StaticToken{{Token: viewerToken, User: "viewer", Groups: []string{"ferry-test:viewers"}}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi: start:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "kubeapi: Start took %s\n", time.Since(began).Round(time.Millisecond))
	srv = s
	logMemory("after Start")
	code := m.Run()
	logMemory("after tests")
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi: stop:", err)
		return 1
	}
	return code
}

// logMemory prints the resident and peak memory of etcd and kube-apiserver.
func logMemory(when string) {
	etcd, apiserver := srv.PIDs()
	for _, p := range []struct {
		name string
		pid  int
	}{{"etcd", etcd}, {"kube-apiserver", apiserver}} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
		if err != nil {
			continue
		}
		var rss, hwm string
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				rss = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				hwm = strings.TrimSpace(v)
			}
		}
		fmt.Fprintf(os.Stderr, "kubeapi: %s %s: RSS %s, peak %s\n", when, p.name, rss, hwm)
	}
}

// newVMI creates a VirtualMachineInstance with a status, the way virt-controller would
// have left it. KubeVirt's CRD has no status subresource, so a create keeps the status
// it is given (virt-api's rules here apply to updates).
func newVMI(t *testing.T, ctx context.Context, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	vmi := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1",
		"kind":       "VirtualMachineInstance",
		"metadata": map[string]any{
			"name":   name,
			"labels": map[string]any{"kubevirt.io/nodeName": "node-a"},
		},
		"spec": map[string]any{
			"domain": map[string]any{
				"resources": map[string]any{"requests": map[string]any{"memory": "1Gi"}},
				"devices":   map[string]any{},
			},
			"evictionStrategy": "LiveMigrate",
		},
		"status": map[string]any{
			"phase":    "Scheduled",
			"nodeName": "node-a",
			"conditions": []any{map[string]any{
				"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z",
			}},
			"activePods": map[string]any{"6a1f0c2e-0000-4000-8000-000000000001": "node-a"},
		},
	}}
	out, err := srv.Dynamic.Resource(kubeapi.VMIResource).Namespace(namespace).Create(ctx, vmi, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(out.Object, "status", "phase"); phase != "Scheduled" {
		t.Fatalf("status after create: %v", out.Object["status"])
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
