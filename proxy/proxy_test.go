package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferry-vm/ferry/peer"
)

// node is one proxy on loopback with its own socket dir and a fake
// libvirt for its incoming migrations.
type node struct {
	p    *Proxy
	addr string
	dir  string
	in   *fakeIncoming
}

func startNode(t *testing.T, files *TLSFiles) *node {
	t.Helper()
	return startNodeWith(t, Config{TLS: files})
}

// startNodeWith starts a node from cfg, on loopback in a temporary socket
// dir with short timeouts.
func startNodeWith(t *testing.T, cfg Config) *node {
	t.Helper()
	return startNodeIDs(t, cfg, func(label string) string { return label })
}

// startNodeIDs is startNodeWith naming migrations with newID; most tests
// have the target take the source's label as the id, so they can name it.
func startNodeIDs(t *testing.T, cfg Config, newID func(string) string) *node {
	t.Helper()
	dir := cfg.SocketDir
	if dir == "" {
		dir = shortTempDir(t)
	}
	in := newFakeIncoming()
	if cfg.Incoming == nil {
		cfg.Incoming = in
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.SocketDir = dir
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = 500 * time.Millisecond
	}
	cfg.DialTimeout, cfg.Metrics = 2*time.Second, testMetrics()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if newID != nil {
		p.newID = newID
	}
	addr, err := p.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Serve(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &node{p: p, addr: addr.String(), dir: dir, in: in}
}

// roundTrip sends n random bytes through the source socket and checks the
// same bytes come back and the stream ends cleanly.
func roundTrip(t *testing.T, path string, n int) {
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	payload := make([]byte, n)
	rand.Read(payload)
	want := sha256.Sum256(payload)
	go func() {
		c.Write(payload)
		c.(*net.UnixConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Errorf("reading the echo: %v", err)
		return
	}
	if len(got) != n || sha256.Sum256(got) != want {
		t.Errorf("echo: got %d bytes (hash match %v), want %d", len(got), sha256.Sum256(got) == want, n)
	}
}

func TestRelaysEveryStreamPlainAndTLS(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		name := "plain"
		if withTLS {
			name = "mtls"
		}
		t.Run(name, func(t *testing.T) {
			var srcFiles, dstFiles *TLSFiles
			if withTLS {
				ca := newTestCA(t, "ferry-test-ca")
				a, b := ca.issue(t, t.TempDir(), "ferry"), ca.issue(t, t.TempDir(), "ferry")
				srcFiles, dstFiles = &a, &b
			}
			src := startNode(t, srcFiles)
			dst := startNode(t, dstFiles)
			const id = "m1"
			prepare(t, src, dst, id, 3, true)
			sm, err := src.p.OpenSource(id, dst.addr, []peer.Kind{peer.KindMemory, peer.KindDisk}, os.Getpid(), 0)
			if err != nil {
				t.Fatal(err)
			}
			const size = 8 << 20
			var wg sync.WaitGroup
			// Four memory connections, as multifd opens them with
			// three channels.
			for _, k := range []peer.Kind{peer.KindMemory, peer.KindMemory, peer.KindMemory, peer.KindMemory, peer.KindDisk} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					roundTrip(t, sm.Paths[k], size)
				}()
			}
			wg.Wait()
			if got := sm.Counters.ToTarget[peer.KindMemory].Load(); got != 4*size {
				t.Errorf("source counted %d bytes to the target on memory, want %d", got, 4*size)
			}
			if got := sm.Counters.Conns[peer.KindMemory].Load(); got != 4 {
				t.Errorf("%d memory connections counted, want 4", got)
			}
			fin := finish(t, src, dst, id, false)
			if got := fin.Counters["disk"]["fromTarget"]; got != size {
				t.Errorf("target counted %d bytes back on disk, want %d", got, size)
			}
			sm.Close("test done")
			for _, p := range sm.Paths {
				if _, err := net.Dial("unix", p); err == nil {
					t.Errorf("source socket %s still accepts after Close", p)
				}
			}
		})
	}
}

func TestRefusesWhatItMustAndKeepsServing(t *testing.T) {
	ca := newTestCA(t, "ferry-test-ca")
	srcFiles, dstFiles := ca.issue(t, t.TempDir(), "ferry"), ca.issue(t, t.TempDir(), "ferry")
	src := startNode(t, &srcFiles)
	dst := startNode(t, &dstFiles)
	rejected := func(reason string) float64 { return testutil.ToFloat64(dst.p.metrics.Rejected.WithLabelValues(reason)) }

	t.Run("certificate from another CA", func(t *testing.T) {
		other := newTestCA(t, "someone-else")
		f := other.issue(t, t.TempDir(), "ferry")
		stranger := startNode(t, &f)
		before := rejected("tls_handshake")
		if _, err := stranger.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "x", Domain: "vm", XML: testXML}); err == nil {
			t.Fatal("a peer with a foreign certificate prepared a migration")
		}
		waitMetric(t, func() bool { return rejected("tls_handshake") == before+1 })
	})
	t.Run("certificate from another CA, trusting ours", func(t *testing.T) {
		// The client's side of a TLS 1.3 handshake ends before the server
		// has judged the client's certificate: the refusal must still name
		// TLS, not a bare reset.
		other := newTestCA(t, "someone-else")
		f := other.issue(t, t.TempDir(), "ferry")
		f.CA = dstFiles.CA
		stranger := startNode(t, &f)
		_, err := stranger.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "x", Domain: "vm", XML: testXML})
		if err == nil || !strings.Contains(err.Error(), "tls:") {
			t.Fatalf("refusal of an untrusted client certificate: %v, want the TLS alert named", err)
		}
	})
	t.Run("certificate for another name", func(t *testing.T) {
		f := ca.issue(t, t.TempDir(), "not-ferry")
		f.PeerName = "ferry"
		impostor := startNode(t, &f)
		before := rejected("tls_handshake")
		if _, err := impostor.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "x", Domain: "vm", XML: testXML}); err == nil {
			t.Fatal("a certificate without the peer name prepared a migration")
		}
		waitMetric(t, func() bool { return rejected("tls_handshake") == before+1 })
	})
	t.Run("plain TCP to the TLS port", func(t *testing.T) {
		before := rejected("tls_handshake")
		c, err := net.Dial("tcp", dst.addr)
		if err != nil {
			t.Fatal(err)
		}
		hb, _ := peer.Header{Kind: peer.KindMemory, ID: "m1"}.Encode()
		c.Write(hb)
		io.ReadAll(c)
		c.Close()
		waitMetric(t, func() bool { return rejected("tls_handshake") == before+1 })
	})
	t.Run("unregistered migration", func(t *testing.T) {
		before := rejected("unknown_migration")
		_, _, err := src.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "never-registered"})
		var refused *peer.RefusedError
		if !errorsAs(err, &refused) || !bytes.Contains([]byte(refused.Reason), []byte("not prepared")) {
			t.Fatalf("error %v, want a refusal naming the unregistered migration", err)
		}
		waitMetric(t, func() bool { return rejected("unknown_migration") == before+1 })
	})
	t.Run("garbage header", func(t *testing.T) {
		before := rejected("malformed_header")
		c := tlsDial(t, src, dst)
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		io.ReadAll(c)
		c.Close()
		waitMetric(t, func() bool { return rejected("malformed_header") == before+1 })
	})
	t.Run("header that never completes", func(t *testing.T) {
		before := rejected("header_timeout")
		c := tlsDial(t, src, dst)
		c.Write([]byte("FRY\x02"))
		start := time.Now()
		io.ReadAll(c) // the proxy hangs up at its header deadline
		c.Close()
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("partial header held the connection %v", took)
		}
		waitMetric(t, func() bool { return rejected("header_timeout") == before+1 })
	})
	t.Run("still serving a prepared migration", func(t *testing.T) {
		prepare(t, src, dst, "ok1", 0, false)
		sm, err := src.p.OpenSource("ok1", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer sm.Close("done")
		roundTrip(t, sm.Paths[peer.KindMemory], 1<<20)
	})
	t.Run("ended migration", func(t *testing.T) {
		finish(t, src, dst, "ok1", false)
		before := rejected("expired_migration")
		if _, _, err := src.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "ok1"}); err == nil {
			t.Fatal("relay of an ended migration accepted")
		}
		waitMetric(t, func() bool { return rejected("expired_migration") == before+1 })
	})
}

func tlsDial(t *testing.T, src, dst *node) net.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", dst.addr)
	if err != nil {
		t.Fatal(err)
	}
	c := tlsClient(raw, src.p)
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	return c
}

func waitMetric(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("refusal was not counted")
}

// shortTempDir is a directory for sockets, removed when the test ends:
// t.TempDir's are named after the test and leave a socket path little
// room within its 107 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
