package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

func TestIncomingMigrationsAreCapped(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	for i := range MaxIncoming {
		prepareAs(t, src, dst, fmt.Sprintf("cap%d", i), fmt.Sprintf("vm%d", i), 0, false)
	}
	_, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "over", Domain: "vm-over", XML: testXML})
	var ce *peer.ControlError
	if !errors.As(err, &ce) || ce.Reason != reasonTooManyIncoming {
		t.Fatalf("prepare past the cap: %v, want %s", err, reasonTooManyIncoming)
	}
}

// holdControls opens n control connections from addr that send their
// header and never their request.
func holdControls(t *testing.T, to string, from net.IP, n int) {
	t.Helper()
	hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
	for range n {
		c, err := d.Dial("tcp", to)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write(hb)
	}
}

func controlFrom(t *testing.T, to string, from net.IP) peer.ControlResponse {
	t.Helper()
	return controlRequestFrom(t, to, from, `{"op":"cancel","migration":"x","domain":"vm"}`)
}

// controlRequestFrom sends one control request from address from.
func controlRequestFrom(t *testing.T, to string, from net.IP, req string) peer.ControlResponse {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
	c, err := d.Dial("tcp", to)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(append(hb, req...))
	var resp peer.ControlResponse
	json.NewDecoder(c).Decode(&resp)
	return resp
}

func TestControlConnectionsAreCapped(t *testing.T) {
	dst := startNode(t, nil)
	for i := range MaxControlConns / MaxControlConnsPerPeer {
		holdControls(t, dst.addr, net.IPv4(127, 0, 1, byte(i+1)), MaxControlConnsPerPeer)
	}
	waitMetric(t, func() bool { return dst.p.controls.Load() == MaxControlConns })
	if resp := controlFrom(t, dst.addr, net.IPv4(127, 0, 2, 1)); resp.Reason != reasonTooManyControls {
		t.Fatalf("control connection past the cap answered %+v, want %s", resp, reasonTooManyControls)
	}
}

// One peer's slow requests take its own share of the control connections,
// not the others'.
func TestOnePeerHoldsItsShareOfControlConnections(t *testing.T) {
	dst := startNode(t, nil)
	greedy, other := net.IPv4(127, 0, 1, 1), net.IPv4(127, 0, 1, 2)
	holdControls(t, dst.addr, greedy, MaxControlConnsPerPeer)
	waitMetric(t, func() bool { return dst.p.controls.Load() == MaxControlConnsPerPeer })
	if resp := controlFrom(t, dst.addr, greedy); resp.Reason != reasonTooManyFromPeer || !strings.Contains(resp.Error, "8 control connections") {
		t.Fatalf("the greedy peer's next control connection answered %+v, want %s", resp, reasonTooManyFromPeer)
	}
	// Another peer is heard: its cancel of an unknown migration is refused
	// for that, not for want of a connection.
	if resp := controlFrom(t, dst.addr, other); resp.Reason == reasonTooManyFromPeer || resp.Reason == reasonTooManyControls || resp.Reason == "" {
		t.Fatalf("another peer's control request answered %+v", resp)
	}
}

// Connections that never finish their header are bounded, per address:
// 600 of them from one address hold at most MaxOpeningPerAddr goroutines,
// and a peer at another address still prepares and relays meanwhile.
func TestHalfOpenConnectionsAreBounded(t *testing.T) {
	src := startNode(t, nil)
	dst := startNode(t, nil)
	base := runtime.NumGoroutine()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for i := 0; i < 600; i++ {
		c, err := d.Dial("tcp", dst.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{'F'}) // a header begun, never ended
		conns = append(conns, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rejectedOf(dst, reasonTooManyOpening) < 600-MaxOpeningPerAddr {
		if time.Now().After(deadline) {
			t.Fatalf("%v connections refused as too many opening, want %d", rejectedOf(dst, reasonTooManyOpening), 600-MaxOpeningPerAddr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine() - base; n > MaxOpeningPerAddr+50 {
		t.Errorf("%d goroutines for 600 half-open connections from one address, want at most about %d", n, MaxOpeningPerAddr)
	}
	// The peer, at its own address, is not locked out.
	prepare(t, src, dst, "h1", 0, false)
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	for deadline := time.Now().Add(5 * time.Second); dst.p.openingCount() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still counted as opening after all closed", dst.p.openingCount())
		}
	}
}

// A peer reads at most MaxReadingPerPeer requests at once; another peer
// is not held back by it, and a slot given back is taken again.
func TestRequestsAreReadAFewAtATimePerPeer(t *testing.T) {
	p, err := New(Config{Listen: "127.0.0.1:0", SocketDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	who := Peer{Node: "a"}
	var releases []func()
	for i := 0; i < MaxReadingPerPeer; i++ {
		r, err := p.startReading(who, a, time.Now())
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		releases = append(releases, r)
	}
	if _, err := p.startReading(who, a, time.Now().Add(50*time.Millisecond)); err == nil {
		t.Fatal("a peer read one more request than its share")
	}
	other, err := p.startReading(Peer{Node: "b"}, a, time.Now())
	if err != nil {
		t.Fatalf("another peer held back: %v", err)
	}
	other()
	releases[0]()
	releases[0]() // once only
	if r, err := p.startReading(who, a, time.Now()); err != nil {
		t.Fatalf("a slot given back is not taken again: %v", err)
	} else {
		r()
	}
	if p.reading.inAll != MaxReadingPerPeer-1 {
		t.Errorf("%d requests counted as being read, want %d", p.reading.inAll, MaxReadingPerPeer-1)
	}
}

// Prepares trickling their domain XML hold every reading slot; a finish or
// a cancel, a few hundred bytes, is still answered at once: it never waits
// behind them (a finish that waits keeps a guest paused, or in post-copy
// loses it).
func TestSmallRequestsNeverWaitForAReadingSlot(t *testing.T) {
	src := startNode(t, nil)
	dst := startNode(t, nil)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	for i := 0; i < MaxReading; i++ {
		release, err := dst.p.startReading(Peer{Node: fmt.Sprintf("x%d", i)}, a, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		defer release()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := src.p.Control(ctx, dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: "gone", Domain: "vm"})
	var ce *peer.ControlError
	if !errors.As(err, &ce) || ce.Reason == reasonTooManyReading {
		t.Fatalf("a cancel while every reading slot is held: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the cancel was answered after %v", d)
	}
	// A large request does wait, and is refused saying why.
	big := append([]byte(`{"op":"prepare","migration":"p","domain":"vm","xml":"`), make([]byte, 2*readGate)...)
	for i := range big[len(big)-2*readGate:] {
		big[len(big)-2*readGate+i] = 'a'
	}
	resp := rawControl(t, dst.addr, append(big, `"}`...))
	if resp.Reason != reasonTooManyReading || !strings.Contains(resp.Error, "waited for one to end") {
		t.Errorf("a large request while every slot is held: %+v", resp)
	}
}

// Finishes waiting on their migrations do not count against the peer's
// share: with one held for each of more migrations than the share, the
// same peer still prepares and cancels.
func TestHeldFinishesLeaveThePeerItsControlConnections(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	hold := make(chan struct{})
	defer close(hold)
	dst.in.mu.Lock()
	dst.in.finishHold = hold
	dst.in.mu.Unlock()
	n := MaxControlConnsPerPeer + 2
	for i := range n {
		id, dom := fmt.Sprintf("held%d", i), fmt.Sprintf("vm%d", i)
		prepareAs(t, src, dst, id, dom, 0, false)
		sm, err := src.p.OpenSource(id, dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer sm.Close("test done")
		roundTrip(t, sm.Paths[peer.KindMemory], 1024)
		go src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: id, Domain: dom})
	}
	waitMetric(t, func() bool {
		dst.in.mu.Lock()
		defer dst.in.mu.Unlock()
		return len(dst.in.finished) == n
	})
	if resp := prepareAs(t, src, dst, "more", "vm-more", 0, false); resp.Error != "" {
		t.Fatalf("a prepare behind %d held finishes: %+v", n, resp)
	}
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: "more", Domain: "vm-more"}); err != nil {
		t.Fatalf("a cancel behind %d held finishes: %v", n, err)
	}
}

// One peer's prepared migrations, stalled however long, take at most its
// share of the node's: another peer still prepares.
func TestOnePeerPreparesItsShareOfIncomingMigrations(t *testing.T) {
	ca := newTestCA(t, "ca")
	greedy := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	other := nodeWithCert(t, "c", ca.issueNode(t, t.TempDir(), "c"))
	dst := nodeWithCert(t, "b", ca.issueNode(t, t.TempDir(), "b"))
	for i := range MaxIncomingPerPeer {
		prepareAs(t, greedy, dst, fmt.Sprintf("g%d", i), fmt.Sprintf("vm%d", i), 0, false)
	}
	_, err := greedy.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "over", Domain: "vm-over", XML: testXML, Flags: 1})
	var ce *peer.ControlError
	if !errors.As(err, &ce) || ce.Reason != reasonTooManyIncoming || !strings.Contains(err.Error(), "one peer") {
		t.Fatalf("the greedy peer's next prepare: %v, want %s saying one peer's share", err, reasonTooManyIncoming)
	}
	if resp := prepareAs(t, other, dst, "c1", "vm-c", 0, false); resp.Error != "" {
		t.Fatalf("another peer's prepare: %+v", resp)
	}
}

// holdControlsAs opens n control connections to dst as node as, from
// address from, through the TLS handshake and the header, and never sends
// a request; it returns once dst holds each. No other control connection
// may end meanwhile: one ending as another is taken would leave the count
// where it was.
func holdControlsAs(t *testing.T, as, dst *node, from net.IP, n int) {
	t.Helper()
	hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
	held := dst.p.controls.Load()
	for range n {
		raw, err := d.Dial("tcp", dst.addr)
		if err != nil {
			t.Fatal(err)
		}
		c := tlsClient(raw, as.p)
		t.Cleanup(func() { c.Close() })
		if err := c.Handshake(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(hb); err != nil {
			t.Fatal(err)
		}
		held++
		for end := time.Now().Add(10 * time.Second); dst.p.controls.Load() < held; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("dst never held the control connection (refused: handshake %v, header %v, opening %v)",
					rejectedOf(dst, "tls_handshake"), rejectedOf(dst, "header_timeout"), rejectedOf(dst, reasonTooManyOpening))
			}
		}
	}
}

// Other peers holding every control connection cannot keep a source from
// its migration's finish: a connection past the cap is kept for the
// finishes of a peer's prepared migrations, one each, and serves nothing
// else. A peer with nothing prepared gets none.
func TestAPreparedMigrationFinishesWhileOthersHoldEveryControlConnection(t *testing.T) {
	ca := newTestCA(t, "ca")
	src := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	// The others hold their connections as long as a peer may before its
	// request is read: long enough for the whole test.
	files := ca.issueNode(t, t.TempDir(), "b")
	dst := startNodeWith(t, Config{TLS: &files, Node: "b", HeaderTimeout: time.Minute})
	prepareAs(t, src, dst, "m1", "vm", 0, false)
	// The prepare's connection is served until its end is read.
	waitMetric(t, func() bool { return dst.p.controls.Load() == 0 })
	for i := range MaxControlConns / MaxControlConnsPerPeer {
		name := fmt.Sprintf("c%d", i)
		holdControlsAs(t, nodeWithCert(t, name, ca.issueNode(t, t.TempDir(), name)), dst, net.IPv4(127, 0, 1, byte(i+1)), MaxControlConnsPerPeer)
	}
	for end := time.Now().Add(20 * time.Second); dst.p.controls.Load() != MaxControlConns; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d control connections held, want %d (refused: handshake %v, header %v, opening %v, from peer %v)", dst.p.controls.Load(), MaxControlConns,
				rejectedOf(dst, "tls_handshake"), rejectedOf(dst, "header_timeout"), rejectedOf(dst, reasonTooManyOpening), rejectedOf(dst, reasonTooManyFromPeer))
		}
	}

	late := nodeWithCert(t, "d", ca.issueNode(t, t.TempDir(), "d"))
	_, err := late.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: "m1", Domain: "vm"})
	var ce *peer.ControlError
	if !errors.As(err, &ce) || ce.Reason != reasonTooManyControls {
		t.Fatalf("a peer with nothing prepared, past the cap: %v, want %s", err, reasonTooManyControls)
	}
	_, err = src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m2", Domain: "vm2", XML: testXML, Flags: 1})
	if !errors.As(err, &ce) || ce.Reason != reasonTooManyControls || !strings.Contains(err.Error(), "kept for finishes") {
		t.Fatalf("a prepare on a kept connection: %v, want %s", err, reasonTooManyControls)
	}
	sm, err := src.p.OpenSource("m1", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test done")
	roundTrip(t, sm.Paths[peer.KindMemory], 1024)
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "m1", Domain: "vm", Cookie: []byte("perform")})
	if err != nil || resp.Error != "" {
		t.Fatalf("the preparer's finish while others hold every control connection: %+v, %v", resp, err)
	}
	// The answer was lost, say: the finish asked again hears it again.
	again, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "m1", Domain: "vm", Cookie: []byte("perform")})
	if err != nil || again.Error != "" || again.Outcome != resp.Outcome {
		t.Fatalf("the finish asked again while others hold every control connection: %+v, %v; first %+v", again, err, resp)
	}
}
