package libvirtx

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// Close unblocks a write blocked in the kernel on a peer that does not
// read (it holds the write lock): the socket is closed before the lock is
// taken.
func TestHostileCloseHangsBehindABlockedWrite(t *testing.T) {
	a, b := net.Pipe() // synchronous: a Write blocks until b reads
	defer b.Close()
	fc := newFramedConn(a)
	call := binary.BigEndian.AppendUint32(nil, 28+64)
	call = be32AppendHeader(call, rpcRemoteProgram, 23, 0, 1, rpcStatusOK)
	call = append(call, bytes.Repeat([]byte{'x'}, 64)...)
	go fc.Write(call) // the "daemon" (b) never reads
	time.Sleep(50 * time.Millisecond)
	closed := make(chan struct{})
	go func() {
		fc.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("framedConn.Close hangs while a write is blocked on a peer that does not read: the connection can never be cut")
	}
}

// hostileLauncher relays a client to the fake libvirtd until attack(),
// after which it stops reading the client and floods it with keepalive
// PINGs: what any pod can do behind a socket the launcher glob matches.
func hostileLauncher(t *testing.T, upstream string) (path string, attack func()) {
	path = filepath.Join(t.TempDir(), "virtqemud-sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var stopRead atomic.Bool
	gate := make(chan struct{})
	var wmu sync.Mutex
	var client net.Conn
	ready := make(chan struct{})
	go func() {
		cl, err := ln.Accept()
		if err != nil {
			return
		}
		client = cl
		close(ready)
		up, err := net.Dial("unix", upstream)
		if err != nil {
			cl.Close()
			return
		}
		t.Cleanup(func() { cl.Close(); up.Close() })
		go func() { // daemon -> client, under wmu so PINGs go between packets
			var lb [4]byte
			for {
				if _, err := io.ReadFull(up, lb[:]); err != nil {
					return
				}
				n := binary.BigEndian.Uint32(lb[:])
				body := make([]byte, n-4)
				if _, err := io.ReadFull(up, body); err != nil {
					return
				}
				wmu.Lock()
				cl.Write(append(lb[:], body...))
				wmu.Unlock()
			}
		}()
		buf := make([]byte, 4096)
		for { // client -> daemon, until the attack
			if stopRead.Load() {
				<-gate
				return
			}
			cl.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			n, err := cl.Read(buf)
			if n > 0 {
				up.Write(buf[:n])
			}
			if err != nil && !isTimeoutErr(err) {
				return
			}
		}
	}()
	attack = func() {
		<-ready
		stopRead.Store(true)
		go func() {
			for {
				wmu.Lock()
				_, err := client.Write(pingPacket)
				wmu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	t.Cleanup(func() { close(gate) })
	return path, attack
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A pod's socket that stops reading and floods PINGs fills the socket with
// PONGs; Conn.Close (what Pool.once, the health check and the keepalive's
// own cut rely on) still returns.
func TestHostilePingFloodWithoutReadingMakesConnCloseHang(t *testing.T) {
	s := libvirtxtest.New(t, "")
	path, attack := hostileLauncher(t, s.Path())
	c, err := dial(context.Background(), path, 200*time.Millisecond, filepath.Dir(path), quick, CutOnSilence)
	if err != nil {
		t.Fatal(err)
	}
	if !c.KeepAliveOn() {
		t.Fatal("keepalive off")
	}
	attack()
	time.Sleep(1500 * time.Millisecond) // PONGs fill the socket buffer
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Conn.Close still blocked 5s after a hostile socket stopped reading and flooded PINGs: the pool's once() would never return for this socket")
	}
}

// The same through the pool: the socket is reported lost, and redialled.
func TestHostilePingFloodWedgesThePool(t *testing.T) {
	s := libvirtxtest.New(t, "")
	path, attack := hostileLauncher(t, s.Path())
	p, h, _ := runPool(t, PoolConfig{Sockets: []string{path}, CallTimeout: 100 * time.Millisecond,
		PingEvery: 100 * time.Millisecond, KeepAlive: quick, BackoffMin: 10 * time.Millisecond})
	h.waitServed(t, path)
	attack()
	select {
	case l := <-h.lost:
		t.Logf("lost: %v", l.err)
	case <-time.After(5 * time.Second):
		t.Fatalf("a socket whose pings time out was never reported lost; status %+v", p.Status()[0])
	}
}

// And Pool.Run, which waits for every socket's goroutine, returns once
// its context ends: ferryd's shutdown does not hang on such a socket.
func TestHostilePingFloodHangsThePoolsShutdown(t *testing.T) {
	s := libvirtxtest.New(t, "")
	path, attack := hostileLauncher(t, s.Path())
	_, h, stop := runPool(t, PoolConfig{Sockets: []string{path}, CallTimeout: 100 * time.Millisecond,
		PingEvery: 100 * time.Millisecond, KeepAlive: quick, BackoffMin: 10 * time.Millisecond})
	h.waitServed(t, path)
	attack()
	time.Sleep(1500 * time.Millisecond)
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Pool.Run did not return 5s after its context was cancelled: one hostile launcher socket wedges ferryd's shutdown")
	}
}
