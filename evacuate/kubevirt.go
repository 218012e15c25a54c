package evacuate

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/plan"
)

var namespaceResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// kubeVirtContext is what a plan reads once of the cluster: the KubeVirt
// CR, the MigrationPolicies, and namespaces' labels as asked.
type kubeVirtContext struct {
	dyn      dynamic.Interface
	cr       *unstructured.Unstructured
	policies []*unstructured.Unstructured
	err      error

	mu         sync.Mutex
	namespaces map[string]map[string]string
}

// readKubeVirtContext reads the cluster's migration configuration; nil
// without an API server.
func readKubeVirtContext(ctx context.Context, dyn dynamic.Interface) *kubeVirtContext {
	if dyn == nil {
		return nil
	}
	kc := &kubeVirtContext{dyn: dyn, namespaces: map[string]map[string]string{}}
	kc.cr, kc.policies, kc.err = kubevirt.ReadMigrationContext(ctx, dyn)
	return kc
}

func (kc *kubeVirtContext) namespaceLabels(ctx context.Context, ns string) (map[string]string, error) {
	kc.mu.Lock()
	l, ok := kc.namespaces[ns]
	kc.mu.Unlock()
	if ok {
		return l, nil
	}
	u, err := kc.dyn.Resource(namespaceResource).Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	kc.mu.Lock()
	kc.namespaces[ns] = u.GetLabels()
	kc.mu.Unlock()
	return u.GetLabels(), nil
}

// kubeVirtAdvice fills a VMI's entry with what KubeVirt will do: its
// effective migration configuration, and whether it would hold up a
// drain. It returns the limits and the bandwidth cap to predict with.
func kubeVirtAdvice(ctx context.Context, kc *kubeVirtContext, dom api.Domain, e *api.PlanEntry) (plan.Limits, uint64, error) {
	if kc.err != nil {
		return plan.Limits{}, 0, fmt.Errorf("reading KubeVirt's migration configuration: %w", kc.err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	vmi, err := kc.dyn.Resource(kubevirt.VMIResource).Namespace(dom.Namespace).Get(ctx, dom.VMI, metav1.GetOptions{})
	if err != nil {
		return plan.Limits{}, 0, fmt.Errorf("reading VMI %s/%s: %w", dom.Namespace, dom.VMI, err)
	}
	nsLabels, err := kc.namespaceLabels(ctx, dom.Namespace)
	if err != nil {
		return plan.Limits{}, 0, fmt.Errorf("reading namespace %s: %w", dom.Namespace, err)
	}
	km := kubevirt.EffectiveMigration(vmi, kc.cr, kc.policies, nsLabels)
	e.KubeVirt = &km
	if b, blocked := kubevirt.DrainBlocker(vmi, kc.cr); blocked {
		e.DrainBlock = &b
		e.Migratable = false
	}
	// At the completion timeout KubeVirt switches to post-copy only where
	// both allow it; otherwise it forces the switch-over or cancels.
	limits := plan.Limits{MaxDowntime: time.Duration(km.MaxDowntimeMs) * time.Millisecond, AllowPostCopy: km.AllowPostCopy && km.AllowWorkloadDisruption}
	return limits, km.BandwidthBytesPerSecond, nil
}
