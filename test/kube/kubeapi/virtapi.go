package kubeapi

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

//go:embed virt-api-rules.yaml
var virtAPIRules []byte

// KubeVirtController is the user KubeVirtConfig acts as: virt-controller's service
// account, one of those virt-api lets change a VMI's status and kubevirt.io/ labels.
const KubeVirtController = "system:serviceaccount:kubevirt:kubevirt-controller"

// KubeVirtConfig is the admin's config impersonating KubeVirtController, for tests that
// play KubeVirt's part (setting a VMI's status, moving it to another node).
func (s *Server) KubeVirtConfig() *rest.Config {
	c := rest.CopyConfig(s.Config)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: KubeVirtController,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kubevirt", "system:authenticated"},
	}
	return c
}

// installVirtAPIRules installs the policies and waits until the API server enforces
// both: it loads policies asynchronously, and a test that ran before would pass
// against rules not yet in force.
func (s *Server) installVirtAPIRules(ctx context.Context) error {
	if err := s.Apply(ctx, virtAPIRules, false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	vmis := s.Dynamic.Resource(VMIResource).Namespace(metav1.NamespaceDefault)
	probeVMI := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"generateName": "virt-api-rules-probe-", "labels": map[string]any{"kubevirt.io/nodeName": "probe"}},
		"spec":     map[string]any{"domain": map[string]any{"devices": map[string]any{}}},
		"status":   map[string]any{"phase": "Pending"},
	}}
	created, err := vmis.Create(ctx, probeVMI, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("probe VMI: %w", err)
	}
	defer vmis.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{})
	// Each refusal must be the rule's own (an expression that does not compile also
	// refuses, with failurePolicy Fail), and what virt-api lets through must pass.
	for _, probe := range []struct{ what, patch, refusal string }{
		{"a status change", `{"status":{"phase":"Failed"}}`, "would be reverted by virt-api"},
		{"removing a kubevirt.io/ label", `{"metadata":{"labels":{"kubevirt.io/nodeName":null}}}`, "reserved kubevirt.io/ labels"},
	} {
		for {
			_, err := vmis.Patch(ctx, created.GetName(), types.MergePatchType, []byte(probe.patch), metav1.PatchOptions{})
			if apierrors.IsForbidden(err) && strings.Contains(err.Error(), probe.refusal) {
				break
			}
			if err == nil {
				// Let through before the policy was in force: start over from a new probe.
				vmis.Delete(ctx, created.GetName(), metav1.DeleteOptions{})
				if created, err = vmis.Create(ctx, probeVMI, metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("probe VMI: %w", err)
				}
				err = errors.New("allowed")
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("virt-api rules not in force: %s by the admin: %v", probe.what, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if _, err := vmis.Patch(ctx, created.GetName(), types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"example.com/own":"x"},"annotations":{"example.com/own":"x"}}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("virt-api rules refuse an own label and annotation: %w", err)
	}
	kubevirt, err := dynamic.NewForConfig(s.KubeVirtConfig())
	if err != nil {
		return err
	}
	if _, err := kubevirt.Resource(VMIResource).Namespace(metav1.NamespaceDefault).Patch(ctx, created.GetName(), types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"kubevirt.io/nodeName":"probe2"}},"status":{"phase":"Running"}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("virt-api rules refuse KubeVirt's own change: %w", err)
	}
	return nil
}
