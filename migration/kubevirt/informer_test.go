package kubevirt

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func vmiObject(name, uid, phase, node string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"phase": phase, "nodeName": node}}}
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetUID(types.UID(uid))
	return u
}

func listerOf(t *testing.T, objs ...*unstructured.Unstructured) cache.GenericLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return cache.NewGenericLister(idx, VMIResource.GroupResource())
}

// What the API server expects here is a Running VMI whose status names
// this node, once however many caches hold it; one moving here, or
// scheduled and not yet running, is not.
func TestRunningHereIsWhatTheAPIServerExpectsOnThisNode(t *testing.T) {
	here := vmiObject("web", "u1", "Running", "a")
	w := &Watcher{node: "a", listers: []cache.GenericLister{
		listerOf(t, here, vmiObject("starting", "u2", "Scheduled", "a")),
		listerOf(t, here, vmiObject("incoming", "u3", "Running", "b")),
	}}
	got := w.RunningHere()
	if len(got) != 1 || got[0].UID != "u1" || got[0].Namespace != "ns" || got[0].Name != "web" {
		t.Fatalf("RunningHere: %+v", got)
	}
}
