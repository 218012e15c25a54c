package kubevirt

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// KubeVirtResource is the KubeVirt CR, which holds the cluster's
// configuration; MigrationPolicyResource KubeVirt's cluster-scoped
// MigrationPolicies.
var (
	KubeVirtResource        = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "kubevirts"}
	MigrationPolicyResource = schema.GroupVersionResource{Group: "migrations.kubevirt.io", Version: "v1alpha1", Resource: "migrationpolicies"}
)

// ReadMigrationContext reads what EffectiveMigration and DrainBlocker need
// besides the VMI: the KubeVirt CR KubeVirt takes its configuration from,
// and every MigrationPolicy. A resource whose CRD is not installed reads
// as none (a cluster without KubeVirt, or a KubeVirt older than
// MigrationPolicies), not as an error; anything else the API server
// refuses, RBAC included, is an error.
//
// KubeVirt reads its configuration only from a KubeVirt CR that
// virt-operator has given a phase and that is not being deleted
// (pkg/virt-config); without one it applies its defaults, and so does
// the advice: kubevirtCR is nil. virt-operator refuses a second CR; if
// there are several anyway, the first by namespace and name is taken.
func ReadMigrationContext(ctx context.Context, client dynamic.Interface) (kubevirtCR *unstructured.Unstructured, policies []*unstructured.Unstructured, err error) {
	kvs, err := listIfServed(ctx, client.Resource(KubeVirtResource))
	if err != nil {
		return nil, nil, fmt.Errorf("KubeVirt CRs: %w", err)
	}
	var live []*unstructured.Unstructured
	for i := range kvs {
		kv := &kvs[i]
		phase, _, _ := unstructured.NestedString(kv.Object, "status", "phase")
		if kv.GetDeletionTimestamp() == nil && phase != "" {
			live = append(live, kv)
		}
	}
	sort.Slice(live, func(i, j int) bool {
		if live[i].GetNamespace() != live[j].GetNamespace() {
			return live[i].GetNamespace() < live[j].GetNamespace()
		}
		return live[i].GetName() < live[j].GetName()
	})
	if len(live) > 0 {
		kubevirtCR = live[0]
	}

	mps, err := listIfServed(ctx, client.Resource(MigrationPolicyResource))
	if err != nil {
		return nil, nil, fmt.Errorf("MigrationPolicies: %w", err)
	}
	for i := range mps {
		policies = append(policies, &mps[i])
	}
	return kubevirtCR, policies, nil
}

// listIfServed lists every object of r, in all namespaces; none if the
// API server does not serve r (its CRD is not installed: 404).
func listIfServed(ctx context.Context, r dynamic.NamespaceableResourceInterface) ([]unstructured.Unstructured, error) {
	list, err := r.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}
