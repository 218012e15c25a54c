package kubevirt

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ferry-vm/ferry/migration"
)

// Watcher keeps the VMIs labelled with this node in a local cache, so jobs
// show their VMI without an API call per request.
type Watcher struct {
	lister cache.GenericLister
	synced cache.InformerSynced
	start  func(<-chan struct{})
}

// NewWatcher watches the VMIs whose kubevirt.io/nodeName is node.
func NewWatcher(client dynamic.Interface, node string) *Watcher {
	sel := labels.SelectorFromSet(labels.Set{NodeLabel: node}).String()
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 10*time.Minute, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = sel })
	inf := f.ForResource(VMIResource)
	return &Watcher{lister: inf.Lister(), synced: inf.Informer().HasSynced, start: f.Start}
}

// Run starts the watch and returns once the cache is filled or ctx ends.
func (w *Watcher) Run(ctx context.Context) bool {
	w.start(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), w.synced)
}

// Lookup returns the cached VMI namespace/name.
func (w *Watcher) Lookup(namespace, name string) *migration.VMIInfo {
	obj, err := w.lister.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	return infoFrom(u)
}
