package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// A post-copy whose libvirt Finish fails (a target libvirtd restarted)
// keeps its stream while it moves, since QEMU's stream never passed
// through libvirtd, and lets it go once nothing moves on it.
func TestAPostCopyWhoseFinishFailsKeepsItsStreamWhileItMoves(t *testing.T) {
	still, check := stillFor, streamCheck
	stillFor, streamCheck = 400*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { stillFor, streamCheck = still, check })
	src := startNode(t, nil)
	in := newFakeIncoming()
	in.outcome = func(peer.IncomingMigration) (string, error) { return "", errors.New("libvirt's job still runs") }
	in.finishErr = errors.New("libvirt: the connection to libvirtd was lost")
	dst := startNodeWith(t, Config{Incoming: in})
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "pc", Domain: "vm",
		XML: testXML, Cookie: []byte("begin"), Flags: 1, PostCopy: true}); err != nil {
		t.Fatal(err)
	}
	sm, err := src.p.OpenSource("pc", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("test over")
	c, err := net.Dial("unix", sm.Paths[peer.KindMemory])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo := func() error {
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("page")); err != nil {
			return err
		}
		_, err := io.ReadFull(c, make([]byte, 4))
		return err
	}
	if err := echo(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "pc", Domain: "vm"}); resp.Outcome != "" {
		t.Fatalf("the finish answered %+v, want no outcome yet", resp)
	}
	for end := time.Now().Add(3 * stillFor); time.Now().Before(end); time.Sleep(stillFor / 4) {
		if err := echo(); err != nil {
			t.Fatalf("the stream was cut while it moved: %v", err)
		}
	}
	c.SetDeadline(time.Now().Add(5 * stillFor))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("the stream still stood once nothing moved on it: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
