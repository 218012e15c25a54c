package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the socket calls a wire makes.
type countingConn struct {
	net.Conn
	reads, writes atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error)  { c.reads.Add(1); return c.Conn.Read(p) }
func (c *countingConn) Write(p []byte) (int, error) { c.writes.Add(1); return c.Conn.Write(p) }

// tlsOverWires is a TLS client and server, each over a wire over a
// counting loopback TCP socket.
func tlsOverWires(t *testing.T) (client, server *tls.Conn, cc, sc *countingConn) {
	t.Helper()
	ca := newTestCA(t, "ferry-test-ca")
	a, b := ca.issue(t, t.TempDir(), "ferry"), ca.issue(t, t.TempDir(), "ferry")
	srcTLS, err := newTLSSource(a)
	if err != nil {
		t.Fatal(err)
	}
	dstTLS, err := newTLSSource(b)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc, sc = &countingConn{Conn: raw}, &countingConn{Conn: <-accepted}
	client = tls.Client(&wire{Conn: cc}, srcTLS.clientConfig())
	server = tls.Server(&wire{Conn: sc}, dstTLS.serverConfig())
	errc := make(chan error, 1)
	go func() { errc <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server, cc, sc
}

// A relay's chunk goes out in one socket write and comes in through a few
// large reads, where TLS alone makes a call per 16 KiB record.
func TestTLSRelayMovesAChunkInFewSocketCalls(t *testing.T) {
	client, server, cc, sc := tlsOverWires(t)
	_, cw := wireOf(client)
	_, sw := wireOf(server)
	defer cw.relaying()()
	defer sw.relaying()()

	chunk := make([]byte, relayBuffer)
	rand.Read(chunk)
	writes, reads := cc.writes.Load(), sc.reads.Load()
	go func() {
		if _, err := cw.writeThrough(client, chunk); err != nil {
			t.Error(err)
		}
		// bufferedCopy ends at EOF; the client's close_notify gives it.
		client.CloseWrite()
	}()
	out, in := net.Pipe()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(in)
		got <- b
	}()
	if err := bufferedCopy(out, server, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if b := <-got; !bytes.Equal(b, chunk) {
		t.Fatalf("relayed %d bytes, not the %d written", len(b), len(chunk))
	}
	records := relayBuffer / (16 << 10)
	if w := cc.writes.Load() - writes; w > 2 { // the chunk, and close_notify
		t.Errorf("%d socket writes for a %d-record chunk, want the chunk in one", w, records)
	}
	if r := sc.reads.Load() - reads; r > int64(records)/2 {
		t.Errorf("%d socket reads for %d records, want them read in large chunks", r, records)
	}
}

// Nothing is held back waiting for more: a small message is relayed as soon
// as it comes, so an exchange of requests and answers (post-copy's page
// requests) never stalls in the relay.
func TestTLSRelayPassesSmallMessagesAtOnce(t *testing.T) {
	client, server, _, _ := tlsOverWires(t)
	_, cw := wireOf(client)
	_, sw := wireOf(server)
	defer cw.relaying()()
	defer sw.relaying()()
	out, in := net.Pipe()
	copied := make(chan error, 1)
	go func() { copied <- bufferedCopy(out, server, func(int64) {}) }()
	// The relay's buffers go back only once its copy has ended.
	defer func() { server.Close(); <-copied }()
	for _, n := range []int{1, 100, 16<<10 + 1, 40000, 300000} {
		msg := make([]byte, n)
		rand.Read(msg)
		go cw.writeThrough(client, msg)
		in.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, n)
		if _, err := io.ReadFull(in, got); err != nil {
			t.Fatalf("a %d-byte message: %v", n, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("a %d-byte message came out changed", n)
		}
	}
}

func TestRelayEngineSaysWhatTheKernelOffers(t *testing.T) {
	e := RelayEngine()
	t.Log(e)
	if !strings.Contains(e, "kernel TLS") || !strings.Contains(e, "splice") {
		t.Errorf("the relay engine does not say what it uses: %q", e)
	}
}

// A relay cut while its peer has stopped reading closes at once: TLS's
// close_notify does not wait behind the chunk the peer will not take.
func TestTLSRelayClosesAtOnceWhenThePeerStopsReading(t *testing.T) {
	client, _, _, _ := tlsOverWires(t)
	_, cw := wireOf(client)
	defer cw.relaying()()
	chunk := make([]byte, relayBuffer)
	wrote := make(chan error, 1)
	go func() {
		// The server never reads: the socket buffers fill and a write
		// blocks.
		for {
			if _, err := cw.writeThrough(client, chunk); err != nil {
				wrote <- err
				return
			}
		}
	}()
	// Blocked: flushing for more than a moment.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if cw.flushing.Load() {
			time.Sleep(200 * time.Millisecond)
			if cw.flushing.Load() {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no batch write blocked on the socket")
		}
	}
	start := time.Now()
	client.Close()
	if took := time.Since(start); took > time.Second {
		t.Errorf("closing took %s", took)
	}
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked batch write did not end when the connection closed")
	}
}
