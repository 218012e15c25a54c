package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
)

func TestIncomingMigrationsAreCapped(t *testing.T) {
	src, dst := startNode(t, nil), startNode(t, nil)
	for i := range MaxIncoming {
		prepareAs(t, src, dst, fmt.Sprintf("cap%d", i), fmt.Sprintf("vm%d", i), 0, false)
	}
	_, err := src.p.Control(context.Background(), dst.addr, ControlRequest{Op: OpPrepare, Migration: "over", Domain: "vm-over", XML: testXML})
	var ce *ControlError
	if !errors.As(err, &ce) || ce.Reason != reasonTooManyIncoming {
		t.Fatalf("prepare past the cap: %v, want %s", err, reasonTooManyIncoming)
	}
}

func TestControlConnectionsAreCapped(t *testing.T) {
	dst := startNode(t, nil)
	hb, _ := Header{Kind: KindControl}.Encode()
	for range MaxControlConns {
		c, err := net.Dial("tcp", dst.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(hb) // and never the request
	}
	waitMetric(t, func() bool { return dst.p.controls.Load() == MaxControlConns })
	if resp := rawControl(t, dst.addr, []byte(`{"op":"cancel","migration":"x","domain":"vm"}`)); resp.Reason != reasonTooManyControls {
		t.Fatalf("control connection past the cap answered %+v, want %s", resp, reasonTooManyControls)
	}
}

// Connections that never finish their header are bounded: past the cap
// each new one is closed at once, so 600 of them hold at most
// MaxOpeningConns goroutines, and real migrations go on once they go.
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
	for i := 0; i < 600; i++ {
		c, err := net.Dial("tcp", dst.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{'F'}) // a header begun, never ended
		conns = append(conns, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rejectedOf(dst, reasonTooManyOpening) < 600-MaxOpeningConns {
		if time.Now().After(deadline) {
			t.Fatalf("%v connections refused as too many opening, want %d", rejectedOf(dst, reasonTooManyOpening), 600-MaxOpeningConns)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine() - base; n > MaxOpeningConns+50 {
		t.Errorf("%d goroutines for 600 half-open connections, want at most about %d", n, MaxOpeningConns)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	for deadline := time.Now().Add(5 * time.Second); dst.p.opening.Load() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still counted as opening after all closed", dst.p.opening.Load())
		}
	}
	prepare(t, src, dst, "h1", 0, false)
}
