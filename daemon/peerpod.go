package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ferrydComponent is the label value every ferryd pod carries (deploy/).
const ferrydComponent = "ferryd"

// PodNodes finds the node a peer's ferryd pod runs on, for proxy
// certificates that name the pod (cert-manager's CSI driver knows pods, not
// nodes). Only pods of ferryd's own namespace that are ferryd pods count:
// a certificate naming any other pod names no peer.
type PodNodes struct {
	core      kubernetes.Interface
	namespace string

	mu    sync.Mutex
	cache map[string]podNode
}

// NewPodNodes looks ferryd pods up in namespace, ferryd's own.
func NewPodNodes(core kubernetes.Interface, namespace string) *PodNodes {
	return &PodNodes{core: core, namespace: namespace, cache: map[string]podNode{}}
}

type podNode struct {
	node string
	at   time.Time
}

// A pod never moves; the cache only bounds how long a deleted pod's
// certificate would still be taken for its node.
const podNodeTTL = time.Minute

// Resolve is the node the ferryd pod namespace/pod runs on.
func (r *PodNodes) Resolve(ctx context.Context, namespace, pod string) (string, error) {
	if namespace != r.namespace {
		return "", fmt.Errorf("pod %s/%s is not in ferryd's namespace %s", namespace, pod, r.namespace)
	}
	r.mu.Lock()
	if c, ok := r.cache[pod]; ok && time.Since(c.at) < podNodeTTL {
		r.mu.Unlock()
		return c.node, nil
	}
	r.mu.Unlock()
	p, err := r.core.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("looking pod %s/%s up: %w", namespace, pod, err)
	}
	switch {
	case p.Labels["app.kubernetes.io/component"] != ferrydComponent:
		return "", fmt.Errorf("pod %s/%s is not a ferryd pod (label app.kubernetes.io/component=%s)", namespace, pod, ferrydComponent)
	case p.DeletionTimestamp != nil:
		return "", fmt.Errorf("pod %s/%s is being deleted", namespace, pod)
	case p.Spec.NodeName == "":
		return "", fmt.Errorf("pod %s/%s is on no node yet", namespace, pod)
	}
	r.mu.Lock()
	r.cache[pod] = podNode{node: p.Spec.NodeName, at: time.Now()}
	r.mu.Unlock()
	return p.Spec.NodeName, nil
}
