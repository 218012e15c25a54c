package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
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
