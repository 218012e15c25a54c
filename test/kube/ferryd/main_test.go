//go:build kube

package ferryd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

// One API server for the package; deploy/'s namespace and RBAC applied for real, and
// ferryd's clients authenticate as deploy/'s ServiceAccount.
var (
	srv        *kubeapi.Server
	ferryToken string
	repoRoot   string
)

// ferryUser is deploy/'s ServiceAccount as the authorizer sees it.
const ferryUser = "system:serviceaccount:ferry-system:ferry"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	var err error
	if repoRoot, err = kubeapi.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if srv, err = kubeapi.Start(ctx, kubeapi.Options{Log: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi: start:", err)
		return 1
	}
	defer srv.Stop()
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission.yaml"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", f))
		if err == nil {
			err = srv.Apply(ctx, b, false)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "deploy/%s: %v\n", f, err)
			return 1
		}
	}
	if ferryToken, err = srv.ServiceAccountToken(ctx, "ferry-system", "ferry", time.Hour); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := waitFerryPolicy(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// waitFerryPolicy waits until deploy/admission.yaml is in force (the API server
// loads policies asynchronously): a foreign label patched by ferryd's
// ServiceAccount is refused by it, and its own label is not.
func waitFerryPolicy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	vmis := srv.Dynamic.Resource(kubevirt.VMIResource).Namespace(metav1.NamespaceDefault)
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "ferry-policy-probe"},
		"spec":     map[string]any{"domain": map[string]any{"devices": map[string]any{}}},
	}}
	if _, err := vmis.Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("probe VMI: %w", err)
	}
	defer vmis.Delete(context.Background(), "ferry-policy-probe", metav1.DeleteOptions{})
	ferry := dynamic.NewForConfigOrDie(ferryConfig()).Resource(kubevirt.VMIResource).Namespace(metav1.NamespaceDefault)
	for i := 0; ; i++ {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"example.com/probe":"%d"}}}`, i)
		_, err := ferry.Patch(ctx, "ferry-policy-probe", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ferry-vm.io/ labels") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deploy/admission.yaml not in force: a foreign label by ferryd: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, err := ferry.Patch(ctx, "ferry-policy-probe", types.MergePatchType, []byte(`{"metadata":{"labels":{"ferry-vm.io/probe":"1"}}}`), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("deploy/admission.yaml refuses ferryd's own label: %w", err)
	}
	return nil
}

// ferryConfig is what ferryd gets from a kubeconfig for deploy/'s ServiceAccount,
// with ferryd's own request timeout.
func ferryConfig() *rest.Config {
	return &rest.Config{
		Host: srv.URL, BearerToken: ferryToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: srv.CAData},
		Timeout:         10 * time.Second,
		UserAgent:       "ferryd/test",
	}
}

// The launcher pods of every migratingVMI, as KubeVirt lists them in
// status.activePods.
const (
	sourcePod = "6f1e2d3c-0000-4000-8000-00000000a001"
	targetPod = "6f1e2d3c-0000-4000-8000-00000000b002"
)

// migratingVMI creates a VMI in post-copy from node-a to node-b, labelled and with a
// status as KubeVirt leaves it mid-migration.
func migratingVMI(t *testing.T, ctx context.Context, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := kubeapi.MigratingVMI(name, "node-a", "node-b", "PostCopy")
	unstructured.SetNestedField(u.Object, "vms", "metadata", "labels", "example.com/team")
	unstructured.SetNestedMap(u.Object, map[string]any{sourcePod: "node-a", targetPod: "node-b"}, "status", "activePods")
	out, err := srv.Dynamic.Resource(kubevirt.VMIResource).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("VMI %s: %v", name, err)
	}
	return out
}

func getVMI(t *testing.T, ctx context.Context, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := srv.Dynamic.Resource(kubevirt.VMIResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}
