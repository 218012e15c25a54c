//go:build kube

package ferryd_test

import (
	"context"
	"testing"
	"time"
)

// TestMarkLandsOnceAfterAnAPIOutage: the API server is away when both nodes see the
// failure, and both ferryds restart meanwhile (a new Reporter on the same state
// directory); once it is back the mark lands once, with one Event.
func TestMarkLandsOnceAfterAnAPIOutage(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	ns := newNamespace(t, ctx, "outage")
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
	da, db := a.Delivered(), b.Delivered()
	if da["marked"]+db["marked"] != 1 || da["already_marked"]+db["already_marked"] != 1 {
		t.Errorf("outcomes: node-a %v, node-b %v; want one marked, one already_marked", da, db)
	}
	side, node := "source", "node-a"
	if db["marked"] == 1 {
		side, node = "target", "node-b"
	}
	checkMarked(t, ctx, before, side, node)
}
