package proxy

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// TestTargetChoosesSecretIDs: the id that lets a peer relay, finish or
// cancel a migration is the target's, random, and told only to the peer
// that prepared it.
func TestTargetChoosesSecretIDs(t *testing.T) {
	src, other := startNode(t, nil), startNode(t, nil)
	dst := startNodeIDs(t, Config{}, nil)
	resp := prepare(t, src, dst, "label", 0, false)
	if !regexp.MustCompile(`^m-[0-9a-f]{32}$`).MatchString(resp.Migration) {
		t.Fatalf("prepare answered id %q, want m- and 128 random bits", resp.Migration)
	}
	id := resp.Migration
	var texts []string
	for _, req := range []peer.ControlRequest{
		{Op: peer.OpPrepare, Migration: "label", Domain: "vm", XML: testXML},
		{Op: peer.OpPrepare, Migration: "mine", Domain: "vm", XML: testXML},
		{Op: peer.OpFinish, Migration: "label", Domain: "vm"},
		{Op: peer.OpCancel, Migration: "m-00000000000000000000000000000000", Domain: "vm"},
	} {
		r, err := other.p.Control(context.Background(), dst.addr, req)
		if err == nil {
			t.Fatalf("%+v accepted", req)
		}
		texts = append(texts, err.Error(), r.Error, r.Migration)
	}
	_, _, err := other.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "m-0123456789abcdef0123456789abcdef"})
	var refused *peer.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "not prepared") {
		t.Fatalf("a guessed id opened a stream: %v", err)
	}
	for _, s := range texts {
		if strings.Contains(s, id) {
			t.Fatalf("a refusal to another peer names the migration's id: %s", s)
		}
	}
	if len(dst.p.Registered()) != 1 {
		t.Fatalf("refused requests changed the migration: %+v", dst.p.Registered())
	}
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: id, Domain: "vm"}); err != nil {
		t.Fatal(err)
	}
}

// TestFinishBoundToTheTLSPeer: with TLS, another node of the same CA that
// learnt the id still cannot finish or cancel the migration.
func TestFinishBoundToTheTLSPeer(t *testing.T) {
	ca := newTestCA(t, "ca")
	a, b, c := ca.issue(t, t.TempDir(), "ferry"), ca.issue(t, t.TempDir(), "ferry"), ca.issue(t, t.TempDir(), "ferry")
	src, intruder := startNode(t, &a), startNode(t, &b)
	dst := startNodeIDs(t, Config{TLS: &c}, nil)
	id := prepare(t, src, dst, "label", 0, false).Migration
	for _, op := range []string{peer.OpFinish, peer.OpCancel} {
		_, err := intruder.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: op, Migration: id, Domain: "vm", Cancelled: true})
		var ce *peer.ControlError
		if !errors.As(err, &ce) || ce.Reason != "unknown_migration" {
			t.Fatalf("%s from another identity: %v, want unknown_migration", op, err)
		}
	}
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: id, Domain: "vm"}); err != nil {
		t.Fatal(err)
	}
}

// TestRepeatedFinishGetsTheSameAnswer: a source whose finish answer was
// lost asks again and hears the same, not "ended".
func TestRepeatedFinishGetsTheSameAnswer(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	prepare(t, src, dst, "again", 0, false)
	sm, err := src.p.OpenSource("again", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test done")
	roundTrip(t, sm.Paths[peer.KindMemory], 1024)
	first := finish(t, src, dst, "again", false)
	second := finish(t, src, dst, "again", false)
	if string(first.Cookie) != "finished:again" || string(second.Cookie) != string(first.Cookie) {
		t.Fatalf("finish answered %q then %q", first.Cookie, second.Cookie)
	}
}

// TestUnregisterCutsAHeldFinish: a Finish libvirt holds does not keep its
// migration, or the source waiting on it, past the migration's end.
func TestUnregisterCutsAHeldFinish(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	prepare(t, src, dst, "held", 0, false)
	sm, err := src.p.OpenSource("held", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test done")
	roundTrip(t, sm.Paths[peer.KindMemory], 1024)
	hold := make(chan struct{})
	defer close(hold)
	dst.in.mu.Lock()
	dst.in.finishHold = hold
	dst.in.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "held", Domain: "vm"})
		done <- err
	}()
	waitMetric(t, func() bool {
		dst.in.mu.Lock()
		defer dst.in.mu.Unlock()
		return len(dst.in.finished) == 1
	})
	dst.p.Unregister("held", "test ends it")
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cut finish answered success")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the source still waits on a finish whose migration ended")
	}
}
