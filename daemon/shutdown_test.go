package daemon

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/internal/testsock"
	"github.com/ferry-vm/ferry/metrics"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// TestShutdownWaitsForMigrationsInFlight stops a ferryd that is the target
// of a migration with a stream open: Run must keep relaying (and serving
// the debug API) until the stream ends, and refuse new migrations.
func TestShutdownWaitsForMigrationsInFlight(t *testing.T) {
	dir := t.TempDir()
	d, err := New(Config{
		NodeName: "node-b", DebugSocket: filepath.Join(dir, "ferry.sock"), DebugSocketMode: 0o600,
		LibvirtSockets: []string{filepath.Join(dir, "no-libvirt-here")}, SampleInterval: time.Second,
		ProxyListen: "127.0.0.1:0", ProxySocketDir: filepath.Join(dir, "proxy"),
	}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	d.ShutdownGrace = 20 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.cfg.DebugSocket)
	}}}
	healthy := func() bool {
		resp, err := hc.Get("http://ferryd/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	for i := 0; i < 100 && (d.Proxy.Addr() == nil || !healthy()); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	target := d.Proxy.Addr().String()

	src, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", SocketDir: t.TempDir(), Node: "node-a", Metrics: proxy.Metrics(metrics.NewProxy(prometheus.NewRegistry()))})
	if err != nil {
		t.Fatal(err)
	}
	// Registered by hand: this node has no libvirt to prepare with.
	if _, err := d.Proxy.Register("m1", "vm", 0, false); err != nil {
		t.Fatal(err)
	}
	prepare := func(id string) error {
		_, err := src.Control(context.Background(), target, peer.ControlRequest{Op: peer.OpPrepare, Migration: id, Domain: "vm2",
			XML: "<domain><name>vm2</name></domain>"})
		return err
	}
	testsock.Serve(t, proxy.TargetSocketPath(d.cfg.ProxySocketDir, "m1", peer.KindMemory), testsock.Echo)
	sm, err := src.OpenSource("m1", target, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test done")
	stream, err := net.Dial("unix", sm.Paths[peer.KindMemory])
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	echo := func() error {
		stream.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := stream.Write([]byte("page")); err != nil {
			return err
		}
		_, err := io.ReadFull(stream, make([]byte, 4))
		return err
	}
	if err := echo(); err != nil {
		t.Fatal(err)
	}

	cancel()
	var refusal error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		// Refused before too (no libvirt here), but not for the shutdown.
		if refusal = prepare("m2"); errors.Is(refusal, peer.ErrShuttingDown) {
			break
		}
	}
	if refusal == nil || !strings.Contains(refusal.Error(), "ferryd on node-b is shutting down") {
		t.Fatalf("prepare after SIGTERM: %v, want a refusal naming the shutdown", refusal)
	}
	if err := echo(); err != nil {
		t.Fatalf("the stream in flight was cut at shutdown: %v", err)
	}
	if !healthy() {
		t.Error("the debug API went away while a migration was still finishing")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) with a migration in flight", err)
	default:
	}
	stream.(*net.UnixConn).CloseWrite()
	io.ReadAll(stream)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waiting after the migration ended")
	}
}
