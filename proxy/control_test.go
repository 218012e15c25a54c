package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferry-vm/ferry/peer"
)

func TestControlRoundTrip(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	resp := prepare(t, src, dst, "rt1", 2, false)
	if string(resp.Cookie) != "prepared:rt1" {
		t.Fatalf("prepare answered cookie %q, want libvirt's", resp.Cookie)
	}
	m := dst.in.prepared[0]
	wantURI := "unix://" + TargetSocketPath(dst.dir, "rt1", peer.KindMemory)
	if m.Domain != "vm" || m.Parallel != 2 || m.Flags != 1 || m.MemoryURI != wantURI || m.DiskURI != "" ||
		dst.in.xml[0] != testXML || string(dst.in.cookies[0]) != "begin" {
		t.Fatalf("Incoming prepared %+v with xml %q cookie %q; want vm, parallel 2, flags 1, %s", m, dst.in.xml[0], dst.in.cookies[0], wantURI)
	}

	sm, err := src.p.OpenSource("rt1", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test done")
	held := openStream(t, sm.Paths[peer.KindMemory])
	defer held.Close()

	// Finish holds, as libvirt's does in post-copy: the streams must keep
	// relaying meanwhile, new ones (multifd) included.
	hold := make(chan struct{})
	dst.in.mu.Lock()
	dst.in.finishHold = hold
	dst.in.mu.Unlock()
	done := make(chan peer.ControlResponse, 1)
	go func() { done <- finish(t, src, dst, "rt1", false) }()
	waitMetric(t, func() bool {
		dst.in.mu.Lock()
		defer dst.in.mu.Unlock()
		return len(dst.in.finished) == 1
	})
	if err := echoBytes(held, 1<<20); err != nil {
		t.Fatalf("a stream stopped relaying while Finish ran: %v", err)
	}
	roundTrip(t, sm.Paths[peer.KindMemory], 1<<20)
	close(hold)
	fin := <-done
	if string(fin.Cookie) != "finished:rt1" || string(dst.in.cookies[1]) != "perform" || dst.in.finished[0] {
		t.Fatalf("finish: cookie %q, Incoming got cookie %q cancelled %v", fin.Cookie, dst.in.cookies[1], dst.in.finished[0])
	}
	if fin.Counters["memory"]["connections"] != 2 {
		t.Errorf("finish counted %v, want 2 memory connections", fin.Counters)
	}
	if _, err := os.Stat(TargetSocketPath(dst.dir, "rt1", peer.KindMemory)); !os.IsNotExist(err) {
		t.Errorf("target socket left behind after finish: %v", err)
	}
	if len(dst.p.Registered()) != 0 {
		t.Errorf("still registered after finish: %+v", dst.p.Registered())
	}
}

func TestControlCancelAndDrop(t *testing.T) {
	src := startNode(t, nil)
	dst := startNodeWith(t, Config{FirstStreamWait: 300 * time.Millisecond})
	prepareAs(t, src, dst, "c1", "vm1", 0, false)
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: "c1", Domain: "vm1"}); err != nil {
		t.Fatal(err)
	}
	if got := dst.in.cancels(); len(got) != 1 || got[0] != "c1" {
		t.Fatalf("libvirt cancels %v, want c1", got)
	}
	// A source that prepares and then never sends a stream.
	prepareAs(t, src, dst, "c2", "vm2", 0, false)
	// libvirt's cancel comes first, the registry lets go right after.
	for deadline := time.Now().Add(3 * time.Second); len(dst.in.cancels()) != 2 || len(dst.p.Registered()) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a migration without streams: libvirt cancels %v, still registered %+v", dst.in.cancels(), dst.p.Registered())
		}
	}
	// The domain is free again for a new migration.
	prepareAs(t, src, dst, "c3", "vm2", 0, false)
}

// rawControl sends body on a control stream to addr and returns the
// answer, without the client's checks.
func rawControl(t *testing.T, addr string, body []byte) peer.ControlResponse {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go c.Write(append(hb, body...))
	var resp peer.ControlResponse
	json.NewDecoder(c).Decode(&resp)
	return resp
}

func rawHeader(t *testing.T, addr string, b []byte) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(b)
	out, _ := io.ReadAll(c)
	return string(out)
}

func TestControlRefusals(t *testing.T) {
	// A 4 MiB body is sent within the header time even on a busy machine
	// under -race: the refusal asserted is its size, not its pace.
	src, dst := startNode(t, nil), startNodeWith(t, Config{HeaderTimeout: 5 * time.Second})
	rejected := func(reason string) float64 { return testutil.ToFloat64(dst.p.metrics.Rejected.WithLabelValues(reason)) }
	ctl := func(req peer.ControlRequest) string {
		_, err := src.p.Control(context.Background(), dst.addr, req)
		if err == nil {
			t.Fatalf("%+v accepted", req)
		}
		return err.Error()
	}
	stream := func(id string) string {
		_, _, err := src.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: id})
		var refused *peer.RefusedError
		if !errors.As(err, &refused) {
			t.Fatalf("stream of %s: %v, want a refusal", id, err)
		}
		return refused.Reason
	}
	prepareAs(t, src, dst, "dup", "vm-dup", 0, false)
	prepareAs(t, src, dst, "one", "vm-one", 0, false)
	held := openDirect(t, src, dst, "one")
	defer held.Close()
	prepareAs(t, src, dst, "gone", "vm-gone", 0, false)
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: "gone", Domain: "vm-gone"}); err != nil {
		t.Fatal(err)
	}
	big := append([]byte(`{"op":"prepare","migration":"big","domain":"vm","xml":"`), bytes.Repeat([]byte("a"), peer.MaxControlRequest+1)...)

	cases := []struct {
		name, reason string
		try          func() string
	}{
		{"unknown op", reasonUnknownOp, func() string { return ctl(peer.ControlRequest{Op: "register", Migration: "x1", Domain: "vm"}) }},
		{"unknown field", reasonMalformedRequest, func() string {
			return rawControl(t, dst.addr, []byte(`{"op":"prepare","migration":"x2","domain":"vm","streams":["libvirt"]}`)).Error
		}},
		{"oversized body", reasonTooLarge, func() string { return rawControl(t, dst.addr, big).Error }},
		{"bad id", reasonInvalidID, func() string {
			return ctl(peer.ControlRequest{Op: peer.OpPrepare, Migration: "../x", Domain: "vm", XML: testXML})
		}},
		{"bad domain", reasonInvalidDomain, func() string {
			return ctl(peer.ControlRequest{Op: peer.OpPrepare, Migration: "x3", Domain: "a/b", XML: testXML})
		}},
		{"oversized XML", "invalid_domain_xml", func() string {
			return ctl(peer.ControlRequest{Op: peer.OpPrepare, Migration: "x4", Domain: "vm", XML: strings.Repeat("x", peer.MaxDomainXML+1)})
		}},
		{"duplicate prepare", reasonDuplicate, func() string {
			return ctl(peer.ControlRequest{Op: peer.OpPrepare, Migration: "dup", Domain: "vm-dup", XML: testXML})
		}},
		{"second migration of a domain", reasonDuplicate, func() string {
			return ctl(peer.ControlRequest{Op: peer.OpPrepare, Migration: "dup2", Domain: "vm-dup", XML: testXML})
		}},
		{"finish of an unknown migration", "unknown_migration", func() string { return ctl(peer.ControlRequest{Op: peer.OpFinish, Migration: "nope", Domain: "vm"}) }},
		{"finish before any stream", reasonNotStarted, func() string { return ctl(peer.ControlRequest{Op: peer.OpFinish, Migration: "dup", Domain: "vm-dup"}) }},
		{"finish of another domain's migration", reasonInvalidDomain, func() string {
			return ctl(peer.ControlRequest{Op: peer.OpFinish, Migration: "dup", Domain: "vm-other"})
		}},
		{"libvirt stream kind", "malformed_header", func() string { return rawHeader(t, dst.addr, []byte("FRY\x02\x01\x03dup")) }},
		{"version 1 header", "unsupported_version", func() string { return rawHeader(t, dst.addr, []byte("FRY\x01\x02\x03dup")) }},
		{"stream of an unprepared migration", "unknown_migration", func() string { return stream("never") }},
		{"stream after the end", "expired_migration", func() string { return stream("gone") }},
		{"one stream more than prepared", reasonTooManyStreams, func() string { return stream("one") }},
	}
	for _, c := range cases {
		before := rejected(c.reason)
		text := c.try()
		waitMetric(t, func() bool { return rejected(c.reason) == before+1 })
		if strings.Contains(text, dst.dir) {
			t.Errorf("%s: the refusal names the socket dir: %q", c.name, text)
		}
	}
}

// openDirect opens a memory stream of id straight to dst's port, as the
// source side would, and checks it relays.
func openDirect(t *testing.T, src, dst *node, id string) net.Conn {
	t.Helper()
	c, _, err := src.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := echoBytes(c, 4096); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRefusalsNeverNameLocalPaths(t *testing.T) {
	src := startNode(t, nil)
	in := newFakeIncoming()
	dst := startNodeWith(t, Config{Incoming: in, Private: []string{"/run/libvirt/libvirt-sock"}})
	rejected := func(reason string) float64 { return testutil.ToFloat64(dst.p.metrics.Rejected.WithLabelValues(reason)) }
	for i, c := range []struct {
		err    error
		reason string
	}{
		{&peer.Refusal{Reason: "invalid_domain_xml", Msg: "disk under " + dst.dir + " refused"}, "invalid_domain_xml"},
		{fmt.Errorf("libvirt migrate prepare (/run/libvirt/libvirt-sock): cannot listen on unix:%s/x.sock", dst.dir), reasonPrepareFailed},
	} {
		in.mu.Lock()
		in.prepareErr = c.err
		in.mu.Unlock()
		before := rejected(c.reason)
		_, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: fmt.Sprintf("p%d", i), Domain: "vm", XML: testXML})
		var ce *peer.ControlError
		if !errors.As(err, &ce) || ce.Reason != c.reason {
			t.Fatalf("prepare: %v, want a refusal for %s", err, c.reason)
		}
		if strings.Contains(err.Error(), dst.dir) || strings.Contains(err.Error(), "/run/libvirt") {
			t.Errorf("the refusal names a local path: %v", err)
		}
		waitMetric(t, func() bool { return rejected(c.reason) == before+1 })
	}
	// The failed prepares left nothing registered.
	if len(dst.p.Registered()) != 0 {
		t.Fatalf("registered after failed prepares: %+v", dst.p.Registered())
	}
	// A node without Incoming takes no migration at all.
	bare, err := New(Config{Listen: "127.0.0.1:0", SocketDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	resp := bare.control(a, a, peer.ControlRequest{Op: peer.OpPrepare, Migration: "p9", Domain: "vm", XML: testXML}, Peer{}, func() {})
	if resp.Reason != reasonIncomingDisabled {
		t.Fatalf("prepare on a node without Incoming: %+v", resp)
	}
}

// TestDropsAMigrationWhoseSourceWentSilent: the streams of a prepared
// migration end and no finish comes (the source lost the link): the target
// cancels it in libvirt rather than keep its QEMU waiting.
func TestDropsAMigrationWhoseSourceWentSilent(t *testing.T) {
	src := startNode(t, nil)
	dst := startNodeWith(t, Config{FinishWait: 200 * time.Millisecond})
	prepare(t, src, dst, "s1", 0, false)
	c := openDirect(t, src, dst, "s1")
	c.Close()
	waitMetric(t, func() bool { return len(dst.in.cancels()) == 1 })
	if len(dst.p.Registered()) != 0 {
		t.Fatalf("still registered: %+v", dst.p.Registered())
	}
	// One finishing in time is not touched.
	prepare(t, src, dst, "s2", 0, false)
	openDirect(t, src, dst, "s2").Close()
	finish(t, src, dst, "s2", false)
	time.Sleep(400 * time.Millisecond)
	if got := dst.in.cancels(); len(got) != 1 {
		t.Fatalf("libvirt cancels %v after a finished migration", got)
	}
}

// A migration past its time whose guest runs here in post-copy is kept:
// dropping it would cancel the only copy that runs. One not held is
// dropped as before.
func TestAMigrationInPostCopyIsNotDroppedAtItsTime(t *testing.T) {
	src := startNode(t, nil)
	dst := startNodeWith(t, Config{RegistrationTTL: 300 * time.Millisecond})
	dst.in.mu.Lock()
	dst.in.hold = true
	dst.in.mu.Unlock()
	prepare(t, src, dst, "h1", 0, false)
	time.Sleep(time.Second)
	if got := dst.in.cancels(); len(got) != 0 || len(dst.p.Registered()) != 1 {
		t.Fatalf("a migration in post-copy was dropped at its time: cancels %v, registered %+v", got, dst.p.Registered())
	}
	dst.in.mu.Lock()
	dst.in.hold = false
	dst.in.mu.Unlock()
	prepareAs(t, src, dst, "h2", "vm2", 0, false)
	waitMetric(t, func() bool { return len(dst.in.cancels()) == 1 })
}

// TestPostCopyMayOpenOneMoreMemoryConnection: QEMU opens a second channel
// for post-copy, so a migration prepared for post-copy takes 2 + parallel.
func TestPostCopyMayOpenOneMoreMemoryConnection(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "pc1", Domain: "vm",
		XML: testXML, Flags: 1, PostCopy: true}); err != nil {
		t.Fatal(err)
	}
	a, b := openDirect(t, src, dst, "pc1"), openDirect(t, src, dst, "pc1")
	defer a.Close()
	defer b.Close()
	_, _, err := src.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "pc1"})
	var refused *peer.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "prepared for 2 memory") {
		t.Fatalf("third connection of a post-copy migration: %v, want refused", err)
	}
}

// A peer answering a control request with a refusal and no code, or a
// code that is none of a proxy's own, is still read as a refusal coded
// unrecognised, its words quoted: neither stands where this node's account
// of the failure goes.
func TestAPeersRefusalAlwaysCarriesAKnownCode(t *testing.T) {
	for _, code := range []string{"", "certificate", "crashed"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.Read(make([]byte, 4096))
			json.NewEncoder(c).Encode(peer.ControlResponse{Reason: code, Error: "target proxy 10.0.0.9:9475 is node c, not node b asked for"})
			time.Sleep(200 * time.Millisecond)
		}()
		src := startNode(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = src.p.Control(ctx, ln.Addr().String(), peer.ControlRequest{Op: peer.OpFinish, Migration: "m-1", Domain: "vm"})
		var ce *peer.ControlError
		if !errors.As(err, &ce) || ce.Reason != "unrecognised" || !strings.Contains(err.Error(), "refused (unrecognised): ‹target proxy") {
			t.Errorf("code %q: %v, want a refusal coded unrecognised", code, err)
		}
	}
}
