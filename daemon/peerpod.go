package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	err  error
	at   time.Time
}

const (
	// A pod never moves; the cache only bounds how long a deleted pod's
	// certificate would still be taken for its node.
	podNodeTTL = time.Minute
	// podNodeStale is how long a known answer still serves while the API
	// server cannot be asked: a control-plane outage must not stop drains.
	podNodeStale = 10 * time.Minute
	// podNodeRefusedTTL keeps a certificate naming no ferryd pod from
	// costing an API call per connection.
	podNodeRefusedTTL = 10 * time.Second
	// podNodeCacheMax bounds the cache; pods come and go with rollouts.
	podNodeCacheMax = 1024
)

// Resolve is the node the ferryd pod namespace/pod runs on.
func (r *PodNodes) Resolve(ctx context.Context, namespace, pod string) (string, error) {
	if namespace != r.namespace {
		return "", fmt.Errorf("pod %s/%s is not in ferryd's namespace %s", namespace, pod, r.namespace)
	}
	r.mu.Lock()
	c, cached := r.cache[pod]
	r.mu.Unlock()
	switch {
	case cached && c.err == nil && time.Since(c.at) < podNodeTTL:
		return c.node, nil
	case cached && c.err != nil && time.Since(c.at) < podNodeRefusedTTL:
		return "", c.err
	}
	node, final, err := r.lookup(ctx, namespace, pod)
	if err != nil && !final && cached && c.err == nil && time.Since(c.at) < podNodeStale {
		// The API server could not answer: the last known node stands.
		return c.node, nil
	}
	if err == nil || final {
		r.remember(pod, podNode{node: node, err: err, at: time.Now()})
	}
	return node, err
}

// lookup asks the API server; final says the answer is the pod's own (it
// is no ferryd pod, or is gone), not a failure to ask.
func (r *PodNodes) lookup(ctx context.Context, namespace, pod string) (node string, final bool, err error) {
	p, err := r.core.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", true, fmt.Errorf("pod %s/%s not found", namespace, pod)
	}
	if err != nil {
		return "", false, fmt.Errorf("looking pod %s/%s up: %w", namespace, pod, err)
	}
	switch {
	case p.Labels["app.kubernetes.io/component"] != ferrydComponent:
		return "", true, fmt.Errorf("pod %s/%s is not a ferryd pod (label app.kubernetes.io/component=%s)", namespace, pod, ferrydComponent)
	case p.DeletionTimestamp != nil:
		return "", true, fmt.Errorf("pod %s/%s is being deleted", namespace, pod)
	case p.Spec.NodeName == "":
		return "", true, fmt.Errorf("pod %s/%s is on no node yet", namespace, pod)
	}
	return p.Spec.NodeName, true, nil
}

func (r *PodNodes) remember(pod string, e podNode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= podNodeCacheMax {
		for k, v := range r.cache {
			if time.Since(v.at) > podNodeTTL {
				delete(r.cache, k)
			}
		}
		if len(r.cache) >= podNodeCacheMax {
			clear(r.cache)
		}
	}
	r.cache[pod] = e
}
