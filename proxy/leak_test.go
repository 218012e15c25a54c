package proxy

import (
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestThousandBrokenConnectionsLeaveNothingBehind opens and breaks 1,000
// relayed connections in the ways a failing migration does, then checks
// that file descriptors and goroutines are back to where they started.
func TestThousandBrokenConnectionsLeaveNothingBehind(t *testing.T) {
	src := startNode(t, nil)
	dst := startNode(t, nil)
	// Registered by hand, for more connections than any prepare allows.
	if _, err := dst.p.Register("leak", "vm", 1000, false); err != nil {
		t.Fatal(err)
	}
	target := TargetSocketPath(dst.dir, "leak", peer.KindMemory)
	ln, err := net.Listen("unix", target)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The fake QEMU reads a little, then hangs up on every other connection.
	go func() {
		n := 0
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n++
			go func(n int) {
				buf := make([]byte, 4096)
				c.Read(buf)
				if n%2 == 0 {
					c.Close()
					return
				}
				for {
					if _, err := c.Read(buf); err != nil {
						c.Close()
						return
					}
				}
			}(n)
		}
	}()
	sm, err := src.p.OpenSource("leak", dst.addr, []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close("done")

	runtime.GC()
	baseFDs, baseG := openFDs(t), runtime.NumGoroutine()
	payload := make([]byte, 64<<10)
	for i := 0; i < 1000; i++ {
		c, err := net.Dial("unix", sm.Paths[peer.KindMemory])
		if err != nil {
			t.Fatal(err)
		}
		c.Write(payload)
		switch i % 3 {
		case 0: // the source QEMU dies mid-stream
			c.Close()
		case 1: // it finishes sending and waits for the target to hang up
			c.(*net.UnixConn).CloseWrite()
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			c.Read(make([]byte, 1))
			c.Close()
		case 2: // garbage straight at the peer port, then gone
			g, err := net.Dial("tcp", dst.addr)
			if err == nil {
				g.Write([]byte("nonsense"))
				g.Close()
			}
			c.Close()
		}
	}
	var fds, gs int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		runtime.GC()
		fds, gs = openFDs(t), runtime.NumGoroutine()
		if fds <= baseFDs && gs <= baseG {
			break
		}
	}
	t.Logf("after 1,000 broken connections: fds %d (baseline %d), goroutines %d (baseline %d)", fds, baseFDs, gs, baseG)
	if fds > baseFDs || gs > baseG {
		t.Fatalf("leak: fds %d > %d or goroutines %d > %d", fds, baseFDs, gs, baseG)
	}
}
