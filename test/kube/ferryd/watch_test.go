//go:build kube

package ferryd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/ferry-vm/ferry/migration/kubevirt"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

// TestWatchOutlivesTheRequestTimeout: with a 2 s request timeout (ferryd uses 10 s)
// a watch from a client of that config is cut, one from kubevirt.WatchConfig stays
// open for 5 s and still delivers.
func TestWatchOutlivesTheRequestTimeout(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "watch")
	vmi := migratingVMI(t, ctx, ns, "vm1")
	rc := ferryConfig()
	rc.Timeout = 2 * time.Second
	open := func(c *dynamic.DynamicClient) watch.Interface {
		w, err := c.Resource(kubevirt.VMIResource).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: vmi.GetResourceVersion()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	cut := open(dynamic.NewForConfigOrDie(rc))
	kept := open(dynamic.NewForConfigOrDie(kubevirt.WatchConfig(rc)))
	began := time.Now()

	select {
	case _, ok := <-cut.ResultChan():
		if ok {
			t.Fatal("an event on an idle VMI")
		}
		t.Logf("a watch with the request timeout was cut after %v", time.Since(began).Round(100*time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Error("a watch with a 2 s request timeout lasted 5 s: this test shows nothing")
	}
	select {
	case ev, ok := <-kept.ResultChan():
		t.Fatalf("watch from WatchConfig ended or got %v (open %v) after %v", ev.Type, ok, time.Since(began))
	case <-time.After(time.Until(began.Add(5 * time.Second))):
	}
	if _, err := srv.Dynamic.Resource(kubevirt.VMIResource).Namespace(ns).Patch(ctx, "vm1", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"example.com/poke":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-kept.ResultChan():
		if !ok || ev.Type != watch.Modified {
			t.Fatalf("after 5 s: %v (open %v), want the change", ev.Type, ok)
		}
		t.Logf("the watch from WatchConfig delivered a change %v after it opened", time.Since(began).Round(100*time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the change never came")
	}
}

// TestWatcherSeesBothNodesVMIs: the target node's ferryd sees the VMI of an incoming
// migration (kubevirt.io/migrationTargetNodeName), the source's by kubevirt.io/nodeName,
// a third node none; and a mark shows in the cache.
func TestWatcherSeesBothNodesVMIs(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	ns := srv.Namespace(t, ctx, "watcher")
	migratingVMI(t, ctx, ns, "vm1")
	watchers := map[string]*kubevirt.Watcher{}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		w, err := kubevirt.NewWatcher(ferryConfig(), node)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		if !w.Run(wctx) {
			t.Fatalf("%s: VMI cache did not fill", node)
		}
		watchers[node] = w
	}
	for node, want := range map[string]bool{"node-a": true, "node-b": true, "node-c": false} {
		if got := watchers[node].Lookup(ns, "vm1") != nil; got != want {
			t.Errorf("%s sees the VMI: %v, want %v", node, got, want)
		}
	}
	if _, err := srv.Dynamic.Resource(kubevirt.VMIResource).Namespace(ns).Patch(ctx, "vm1", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+kubevirt.IrrecoverableLabel+`":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, ctx, "the mark in node-b's cache", func() error {
		if v := watchers["node-b"].Lookup(ns, "vm1"); v == nil || !v.Irrecoverable || v.MigrationState == nil || v.MigrationState.MigrationUID != "mig-vm1" {
			return fmt.Errorf("node-b sees %+v", v)
		}
		return nil
	})
}
