package proxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// relayed prepares id on dst from src and relays a little of its memory
// stream, so a finish is taken.
func relayed(t *testing.T, src, dst *node, id string) {
	t.Helper()
	prepare(t, src, dst, id, 0, false)
	sm, err := src.p.OpenSource(id, dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sm.Close("test done") })
	roundTrip(t, sm.Paths[peer.KindMemory], 1024)
}

func finishes(n *node) int {
	n.in.mu.Lock()
	defer n.in.mu.Unlock()
	return len(n.in.finished)
}

// A finish's answer says whether the guest runs on the target, and a
// repeat (the first answer lost) hears it again without a second Finish.
func TestFinishSaysWhetherTheGuestRunsThereAndSaysItAgain(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	relayed(t, src, dst, "lost")
	first := finish(t, src, dst, "lost", false)
	second := finish(t, src, dst, "lost", false)
	if first.Outcome != peer.OutcomeRunning || second.Outcome != peer.OutcomeRunning || string(second.Cookie) != "finished:lost" {
		t.Fatalf("finish answered %+v, then %+v; want running twice with libvirt's cookie", first, second)
	}
	if n := finishes(dst); n != 1 {
		t.Fatalf("libvirt's Finish ran %d times for one migration", n)
	}
}

// A target ferryd restarted after its finish answers a repeat from its
// record on disk: same outcome, same cookie, no second Finish.
func TestARestartedTargetAnswersFromItsRecord(t *testing.T) {
	dir := t.TempDir()
	src, dst := startNode(t, nil), startNodeWith(t, Config{OutcomeDir: dir})
	relayed(t, src, dst, "kept")
	first := finish(t, src, dst, "kept", false)
	dst.p.Shutdown(context.Background())
	again := startNodeWith(t, Config{OutcomeDir: dir})
	resp, err := src.p.Control(context.Background(), again.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "kept", Domain: "vm"})
	if err != nil || resp.Outcome != peer.OutcomeRunning || string(resp.Cookie) != string(first.Cookie) {
		t.Fatalf("restarted target answered %+v, %v; want the first answer %+v", resp, err, first)
	}
	if n := finishes(again); n != 0 {
		t.Fatalf("the restarted target ran libvirt's Finish %d times", n)
	}
}

// A target ferryd that died between prepare and finish works the outcome
// out from libvirt: settled when libvirt's job is over, "ask again" while
// it runs. Never an answer that would let the source resume a guest that
// runs on the target.
func TestARestartedTargetWorksTheOutcomeOutFromLibvirt(t *testing.T) {
	dir := t.TempDir()
	src, dst := startNode(t, nil), startNodeWith(t, Config{OutcomeDir: dir})
	relayed(t, src, dst, "crashed")
	// No finish will come: the drain is cut short, as a crash would.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	dst.p.Shutdown(ctx)
	cancel()
	// The shutdown ended the migration on its way out, as a crash does
	// not: its record is what a crash leaves, the prepare with no answer.
	rec := filepath.Join(dir, "crashed.json")
	if err := os.WriteFile(rec, []byte(`{"id":"crashed","owner":"","domain":"vm","prepared":"2026-12-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	again := startNodeWith(t, Config{OutcomeDir: dir})
	ask := func() (peer.ControlResponse, error) {
		return src.p.Control(context.Background(), again.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "crashed", Domain: "vm"})
	}
	for _, c := range []struct {
		libvirt func(peer.IncomingMigration) (string, error)
		outcome string
		reason  string
	}{
		{func(peer.IncomingMigration) (string, error) {
			return "", errors.New("domain vm still has a libvirt job")
		}, "", peer.ReasonRestarted},
		{func(peer.IncomingMigration) (string, error) { return peer.OutcomeRunning, nil }, peer.OutcomeRunning, ""},
		// Settled once: a later change of libvirt's view does not undo it.
		{func(peer.IncomingMigration) (string, error) { return peer.OutcomeStopped, nil }, peer.OutcomeRunning, ""},
	} {
		again.in.mu.Lock()
		again.in.outcome = c.libvirt
		again.in.mu.Unlock()
		resp, err := ask()
		var ce *peer.ControlError
		errors.As(err, &ce)
		if resp.Outcome != c.outcome || (c.reason != "") != (ce != nil && ce.Reason == c.reason) {
			t.Fatalf("answered %+v, %v; want outcome %q, refusal %q", resp, err, c.outcome, c.reason)
		}
	}
	// Another migration whose target copy is gone is answered as such,
	// an error with its outcome: the source may resume.
	if err := os.WriteFile(filepath.Join(dir, "gone.json"), []byte(`{"id":"gone","owner":"","domain":"vm2"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	again.in.mu.Lock()
	again.in.outcome = func(peer.IncomingMigration) (string, error) { return peer.OutcomeStopped, nil }
	again.in.mu.Unlock()
	resp, err := src.p.Control(context.Background(), again.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "gone", Domain: "vm2"})
	if err == nil || resp.Outcome != peer.OutcomeStopped || !strings.Contains(err.Error(), "does not run on this node") {
		t.Fatalf("answered %+v, %v; want an error with outcome stopped", resp, err)
	}
	// A record names its peer and domain: another domain learns nothing.
	if resp, err := src.p.Control(context.Background(), again.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "gone", Domain: "vm"}); resp.Outcome != "" || err == nil {
		t.Fatalf("a finish naming another domain answered %+v, %v", resp, err)
	}
}

// A source whose connection broke while libvirt's Finish ran asks again
// and waits for that Finish's answer; it never runs a second one.
func TestARepeatWaitsForTheFinishStillRunning(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	relayed(t, src, dst, "slow")
	hold := make(chan struct{})
	dst.in.mu.Lock()
	dst.in.finishHold = hold
	dst.in.mu.Unlock()
	ctx, cut := context.WithCancel(context.Background())
	go src.p.Control(ctx, dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "slow", Domain: "vm"})
	waitMetric(t, func() bool { return finishes(dst) == 1 })
	cut()
	done := make(chan peer.ControlResponse, 1)
	go func() {
		resp, _ := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "slow", Domain: "vm"})
		done <- resp
	}()
	select {
	case resp := <-done:
		t.Fatalf("the repeat answered %+v before libvirt's Finish returned", resp)
	case <-time.After(300 * time.Millisecond):
	}
	close(hold)
	select {
	case resp := <-done:
		if resp.Outcome != peer.OutcomeRunning || string(resp.Cookie) != "finished:slow" {
			t.Fatalf("the repeat answered %+v", resp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the repeat never heard the Finish's answer")
	}
	if n := finishes(dst); n != 1 {
		t.Fatalf("libvirt's Finish ran %d times", n)
	}
}

// A target ferryd that died during libvirt's Finish cannot tell, once
// back, a guest that never came from one that ran and has gone since: it
// never answers "stopped", which would let the source resume a copy older
// than what ran.
func TestAFinishBegunNeverSettlesAsStopped(t *testing.T) {
	dir := t.TempDir()
	src := startNode(t, nil)
	if err := os.WriteFile(filepath.Join(dir, "begun.json"), []byte(`{"id":"begun","owner":"","domain":"vm","finishing":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	again := startNodeWith(t, Config{OutcomeDir: dir})
	again.in.mu.Lock()
	again.in.outcome = func(peer.IncomingMigration) (string, error) { return peer.OutcomeStopped, nil }
	again.in.mu.Unlock()
	resp, err := src.p.Control(context.Background(), again.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "begun", Domain: "vm"})
	var ce *peer.ControlError
	if resp.Outcome != "" || !errors.As(err, &ce) || ce.Reason != peer.ReasonRestarted || !strings.Contains(err.Error(), "cannot be told") {
		t.Fatalf("answered %+v, %v; want no outcome, a refusal saying it cannot be told", resp, err)
	}
	// Running is still running: the guest is there.
	again.in.mu.Lock()
	again.in.outcome = func(peer.IncomingMigration) (string, error) { return peer.OutcomeRunning, nil }
	again.in.mu.Unlock()
	if resp, err := src.p.Control(context.Background(), again.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "begun", Domain: "vm"}); err != nil || resp.Outcome != peer.OutcomeRunning {
		t.Fatalf("with the guest there: %+v, %v", resp, err)
	}
}

// breakOutcomeDir makes every later record in dir fail to save, as a full
// or read-only state directory does (root writes through permissions).
func breakOutcomeDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A pre-copy's finish whose guard record cannot be kept is not finished
// but cancelled: the target drops its copy and says so, and the source's
// copy, still whole, runs on. (Before, the guard was best-effort: a
// restart and a guest stopped meanwhile let the source resume an older
// copy of a guest that already ran here.)
func TestNoPreCopyFinishWithoutItsGuardRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outcomes")
	src, dst := startNode(t, nil), startNodeWith(t, Config{OutcomeDir: dir})
	relayed(t, src, dst, "unguarded")
	breakOutcomeDir(t, dir)
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "unguarded", Domain: "vm", Cookie: []byte("perform")})
	if err == nil || resp.Outcome != peer.OutcomeStopped {
		t.Fatalf("finish answered %+v, %v; want the guest stopped here, with an error", resp, err)
	}
	dst.in.mu.Lock()
	defer dst.in.mu.Unlock()
	if len(dst.in.finished) != 1 || !dst.in.finished[0] {
		t.Fatalf("libvirt's Finish ran with cancelled %v, want one cancelled Finish", dst.in.finished)
	}
}

// A post-copy's source never runs again, so its finish goes on without the
// guard: cancelling it would stop the copy that runs.
func TestAPostCopyFinishGoesOnWithoutItsGuardRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outcomes")
	src, dst := startNode(t, nil), startNodeWith(t, Config{OutcomeDir: dir})
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "pc", Domain: "vm",
		XML: testXML, Cookie: []byte("begin"), Flags: 1, PostCopy: true}); err != nil {
		t.Fatal(err)
	}
	sm, err := src.p.OpenSource("pc", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sm.Close("test done") })
	roundTrip(t, sm.Paths[peer.KindMemory], 1024)
	breakOutcomeDir(t, dir)
	if resp := finish(t, src, dst, "pc", false); resp.Outcome != peer.OutcomeRunning {
		t.Fatalf("finish answered %+v, want running", resp)
	}
}
