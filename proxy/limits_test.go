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
	for deadline := time.Now().Add(5 * time.Second); dst.p.opening.Load() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still counted as opening after all closed", dst.p.opening.Load())
		}
	}
}
