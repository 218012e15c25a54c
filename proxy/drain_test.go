package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ferry-vm/ferry/peer"
)

// openStream connects to a source socket and waits for one byte to come
// back through the target's echo, so both sides have the relay in hand.
func openStream(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b := []byte{'x'}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("relay not up: %v", err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// echoBytes sends n bytes on c and reads them back.
func echoBytes(c net.Conn, n int) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, n))
		errc <- err
	}()
	if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
		return err
	}
	return <-errc
}

type shutdownResult struct {
	err  error
	took time.Duration
}

func shutdownAsync(p *Proxy, grace time.Duration) <-chan shutdownResult {
	out := make(chan shutdownResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		start := time.Now()
		err := p.Shutdown(ctx)
		out <- shutdownResult{err, time.Since(start)}
	}()
	return out
}

func waitClosing(t *testing.T, ps ...*Proxy) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		all := true
		for _, p := range ps {
			all = all && p.closingReason() != ""
		}
		if all {
			return
		}
	}
	t.Fatal("shutdown never began")
}

func TestShutdownLetsMigrationsInFlightFinish(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		name := "plain"
		if withTLS {
			name = "mtls"
		}
		t.Run(name, func(t *testing.T) {
			var srcFiles, dstFiles, otherFiles *TLSFiles
			if withTLS {
				ca := newTestCA(t, "ferry-test-ca")
				a, b, c := ca.issue(t, t.TempDir(), "ferry"), ca.issue(t, t.TempDir(), "ferry"), ca.issue(t, t.TempDir(), "ferry")
				srcFiles, dstFiles, otherFiles = &a, &b, &c
			}
			src := startNodeWith(t, Config{Node: "node-a", TLS: srcFiles})
			dst := startNodeWith(t, Config{Node: "node-b", TLS: dstFiles})
			other := startNodeWith(t, Config{Node: "node-c", TLS: otherFiles})
			prepare(t, src, dst, "m1", 2, false)
			sm, err := src.p.OpenSource("m1", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer sm.Close("test done")
			// Prepared and given sockets, but not started when the
			// shutdown begins: new migrations, to be refused.
			prepareAs(t, src, dst, "m4", "vm4", 0, false)
			notStarted, err := src.p.OpenSource("m5", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer notStarted.Close("test done")

			rpc := openStream(t, sm.Paths[peer.KindMemory])
			defer rpc.Close()
			const grace = 20 * time.Second
			srcDone, dstDone := shutdownAsync(src.p, grace), shutdownAsync(dst.p, grace)
			waitClosing(t, src.p, dst.p)

			if err := echoBytes(rpc, 4<<20); err != nil {
				t.Fatalf("the relay in flight stopped moving bytes during the shutdown: %v", err)
			}
			// A migration in flight may still open streams (multifd).
			roundTrip(t, sm.Paths[peer.KindMemory], 4<<20)

			refusedOn := func(n *node) float64 {
				return testutil.ToFloat64(n.p.metrics.Rejected.WithLabelValues("shutting_down"))
			}
			dstBefore := refusedOn(dst)
			_, err = other.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m2", Domain: "vm2", XML: testXML})
			if err == nil || !strings.Contains(err.Error(), "ferryd on node-b is shutting down") || !errors.Is(err, peer.ErrShuttingDown) {
				t.Fatalf("prepare during the shutdown: %v, want a refusal naming node-b's shutdown", err)
			}
			_, _, err = src.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "m4"})
			var refused *peer.RefusedError
			if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "ferryd on node-b is shutting down") {
				t.Fatalf("first stream of a registered migration that had not started: %v, want refused", err)
			}
			waitMetric(t, func() bool { return refusedOn(dst) == dstBefore+2 })

			srcBefore := refusedOn(src)
			if _, err := src.p.OpenSource("m3", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0); !errors.Is(err, peer.ErrShuttingDown) || !strings.Contains(err.Error(), "ferryd on node-a is shutting down") {
				t.Fatalf("outgoing migration during the shutdown: %v, want ErrShuttingDown naming node-a", err)
			}
			late, err := net.Dial("unix", notStarted.Paths[peer.KindMemory])
			if err != nil {
				t.Fatal(err)
			}
			late.SetReadDeadline(time.Now().Add(3 * time.Second))
			if n, err := late.Read(make([]byte, 1)); n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a migration that had not started was let out during the shutdown (read %d, %v)", n, err)
			}
			late.Close()
			waitMetric(t, func() bool { return refusedOn(src) == srcBefore+2 })
			if errs := notStarted.Errors(); len(errs) == 0 || !strings.Contains(errs[0], "shutting down") {
				t.Errorf("the refused migration's errors %q do not say why", errs)
			}

			select {
			case r := <-srcDone:
				t.Fatalf("source shutdown returned (%v) with a migration in flight", r.err)
			case r := <-dstDone:
				t.Fatalf("target shutdown returned (%v) with a migration in flight", r.err)
			default:
			}
			// The migration ends: its streams close, and the source
			// finishes it, which the target waits for.
			rpc.(*net.UnixConn).CloseWrite()
			io.ReadAll(rpc)
			rpc.Close()
			time.Sleep(3 * drainPoll)
			select {
			case r := <-dstDone:
				t.Fatalf("target shutdown returned (%v) before the finish of a migration whose streams had ended", r.err)
			default:
			}
			finish(t, src, dst, "m1", false)
			for side, done := range map[string]<-chan shutdownResult{"source": srcDone, "target": dstDone} {
				select {
				case r := <-done:
					if r.err != nil || r.took >= grace {
						t.Errorf("%s shutdown: %v after %v, want nil well within %v", side, r.err, r.took, grace)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("%s shutdown still waiting after the migration ended", side)
				}
			}
		})
	}
}

func TestShutdownCutsAndReportsWhatOutlivesTheGrace(t *testing.T) {
	for _, side := range []string{"source", "target"} {
		t.Run(side, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			srcCfg := Config{Node: "node-a", SourceDomain: func(id string) string { return "vm-of-" + id }}
			dstCfg := Config{Node: "node-b"}
			if side == "source" {
				srcCfg.Log = zap.New(core)
			} else {
				dstCfg.Log = zap.New(core)
			}
			src, dst := startNodeWith(t, srcCfg), startNodeWith(t, dstCfg)
			prepare(t, src, dst, "m9", 2, false)
			sm, err := src.p.OpenSource("m9", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer sm.Close("test done")
			held := []net.Conn{openStream(t, sm.Paths[peer.KindMemory]), openStream(t, sm.Paths[peer.KindMemory]), openStream(t, sm.Paths[peer.KindMemory])}
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()

			stopping := map[string]*node{"source": src, "target": dst}[side]
			const grace = 300 * time.Millisecond
			r := <-shutdownAsync(stopping.p, grace)
			if r.err == nil || !strings.Contains(r.err.Error(), "m9") || r.took < grace {
				t.Fatalf("shutdown: %v after %v, want the cut of m9 reported after the %v grace", r.err, r.took, grace)
			}
			for _, c := range held {
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("a relay outlived the grace")
				}
			}

			wantDomain := map[string]string{"source": "vm-of-m9", "target": "vm"}[side]
			var found bool
			for _, e := range logs.FilterMessageSnippet("cutting a migration still in flight").All() {
				f := e.ContextMap()
				streams, _ := f["streams"].([]interface{})
				if e.Level == zap.WarnLevel && f["migration"] == "m9" && f["domain"] == wantDomain && f["side"] == side &&
					len(streams) == 1 && streams[0] == "memory=3" {
					found = true
				}
			}
			if !found {
				t.Fatalf("no warning naming m9, %s, its side and streams; logged: %+v", wantDomain, logs.All())
			}
		})
	}
}
