//go:build kube

package ferryd_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

// TestMarkLandsOnceAfterAnAPIOutage: the API server is away when both nodes see the
// failure, and both ferryds restart meanwhile (a new Reporter on the same state
// directory); once it is back the mark lands once, with one Event.
func TestMarkLandsOnceAfterAnAPIOutage(t *testing.T) {
	ctx := kubeapi.Context(t, 3*time.Minute)
	ns := srv.Namespace(t, ctx, "outage")
	before := migratingVMI(t, ctx, ns, "vm1")
	dirA, dirB := t.TempDir(), t.TempDir()

	if err := srv.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := false
	defer func() {
		if !back {
			srv.StartAPIServer(context.Background())
		}
	}()
	a, b := reporter(t, "node-a", dirA), reporter(t, "node-b", dirB)
	// The domains' metadata names the VMI; the API server is away.
	ma, mb := postCopyMark(ns, "vm1", "node-a", "source"), postCopyMark(ns, "vm1", "node-b", "target")
	ma.UID, mb.UID = string(before.GetUID()), string(before.GetUID())
	a.Report(ma)
	b.Report(mb)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { a.Run(rctx); done <- struct{}{} }()
	go func() { b.Run(rctx); done <- struct{}{} }()
	time.Sleep(3 * time.Second) // a few failed tries
	cancel()
	<-done
	<-done
	if len(a.Pending())+len(b.Pending()) != 2 {
		t.Fatalf("pending with the API away: %v and %v", a.Pending(), b.Pending())
	}

	// ferryd restarts: the marks come back from disk.
	a, b = reporter(t, "node-a", dirA), reporter(t, "node-b", dirB)
	if len(a.Pending()) != 1 || len(b.Pending()) != 1 {
		t.Fatalf("after a restart: pending %v and %v", a.Pending(), b.Pending())
	}
	if err := srv.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	back = true
	runUntilDone(t, ctx, a, b)
	checkMarkedOnce(t, ctx, a, b, before)
}
