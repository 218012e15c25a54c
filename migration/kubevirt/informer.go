package kubevirt

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ferry-vm/ferry/api"
)

// Watcher keeps the VMIs of this node in a local cache, so jobs show their
// VMI without an API call per request. A VMI belongs to this node when it
// runs here (kubevirt.io/nodeName) or migrates here
// (kubevirt.io/migrationTargetNodeName): a label selector cannot say "or",
// so there is one informer per label.
type Watcher struct {
	node    string
	listers []cache.GenericLister
	synced  []cache.InformerSynced
	starts  []func(<-chan struct{})
}

// WatchConfig is rc for long-running requests: client-go applies
// rest.Config.Timeout to the whole request, a watch's stream included, so
// a timeout meant for GET and PATCH would cut every watch after that long
// and make the informer relist.
func WatchConfig(rc *rest.Config) *rest.Config {
	c := rest.CopyConfig(rc)
	c.Timeout = 0
	return c
}

// NewWatcher watches the VMIs that run on node or migrate to it, with a
// client of its own built from WatchConfig(rc).
func NewWatcher(rc *rest.Config, node string) (*Watcher, error) {
	client, err := dynamic.NewForConfig(WatchConfig(rc))
	if err != nil {
		return nil, err
	}
	w := &Watcher{node: node}
	for _, label := range []string{NodeLabel, TargetNodeLabel} {
		sel := labels.SelectorFromSet(labels.Set{label: node}).String()
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 10*time.Minute, metav1.NamespaceAll,
			func(o *metav1.ListOptions) { o.LabelSelector = sel })
		inf := f.ForResource(VMIResource)
		w.listers = append(w.listers, inf.Lister())
		w.synced = append(w.synced, inf.Informer().HasSynced)
		w.starts = append(w.starts, f.Start)
	}
	return w, nil
}

// Run starts the watches and returns once both caches are filled or ctx ends.
func (w *Watcher) Run(ctx context.Context) bool {
	for _, start := range w.starts {
		start(ctx.Done())
	}
	return cache.WaitForCacheSync(ctx.Done(), w.synced...)
}

// Lookup returns the cached VMI namespace/name. A VMI in both caches (just
// handed off, one informer not yet told) is taken from the one with the
// newer resourceVersion.
func (w *Watcher) Lookup(namespace, name string) *api.VMIInfo {
	var best *unstructured.Unstructured
	for _, l := range w.listers {
		obj, err := l.ByNamespace(namespace).Get(name)
		if err != nil {
			continue
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if best == nil || newer(u, best) {
			best = u
		}
	}
	if best == nil {
		return nil
	}
	return infoFrom(best)
}

// newer compares resourceVersions, which are opaque in general but decimal
// etcd revisions in every API server there is; a longer one is larger.
func newer(a, b *unstructured.Unstructured) bool {
	ra, rb := a.GetResourceVersion(), b.GetResourceVersion()
	if len(ra) != len(rb) {
		return len(ra) > len(rb)
	}
	return ra > rb
}

// RunningHere lists the VMIs the API server shows Running on this node
// (status.nodeName): each must have a domain holding its guest somewhere,
// here unless it is moving. Before the caches fill it lists what they hold.
func (w *Watcher) RunningHere() []api.VMIInfo {
	seen := map[string]bool{}
	var out []api.VMIInfo
	for _, l := range w.listers {
		objs, err := l.List(labels.Everything())
		if err != nil {
			continue
		}
		for _, obj := range objs {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok || seen[string(u.GetUID())] {
				continue
			}
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			node, _, _ := unstructured.NestedString(u.Object, "status", "nodeName")
			if phase != "Running" || node != w.node {
				continue
			}
			seen[string(u.GetUID())] = true
			out = append(out, api.VMIInfo{Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), Phase: phase, NodeName: node})
		}
	}
	return out
}
