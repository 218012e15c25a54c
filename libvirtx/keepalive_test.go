package libvirtx

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// quick is a keepalive timed for tests: unresponsive after 150ms.
var quick = KeepAlive{Interval: 50 * time.Millisecond, Count: 3}

func dialKeepAlive(t *testing.T, s *libvirtxtest.Server, on OnSilence) *Conn {
	t.Helper()
	c, err := dial(context.Background(), s.Path(), time.Second, "", quick, on)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if !c.KeepAliveOn() {
		t.Fatal("the fake said yes to keepalive, but the connection has none")
	}
	return c
}

func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
	}
}

// libvirtd's PINGs are answered, and a daemon that only pings is alive.
func TestKeepAliveAnswersTheDaemonsPings(t *testing.T) {
	s := libvirtxtest.New(t, "")
	s.PingClients(10 * time.Millisecond)
	c := dialKeepAlive(t, s, CutOnSilence)
	waitUntil(t, "ten PONGs", 2*time.Second, func() bool { return s.KeepAlives(libvirtxtest.KeepAlivePong) >= 10 })
	if _, ok := c.Unresponsive(); ok {
		t.Fatal("unresponsive while the daemon pings")
	}
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatalf("a call after the PINGs: %v", err)
	}
}

// A quiet connection to a live daemon pings it, and the PONGs keep it alive.
func TestKeepAlivePingsAQuietDaemon(t *testing.T) {
	s := libvirtxtest.New(t, "")
	c := dialKeepAlive(t, s, CutOnSilence)
	waitUntil(t, "three PINGs", 2*time.Second, func() bool { return s.KeepAlives(libvirtxtest.KeepAlivePing) >= 3 })
	time.Sleep(2 * quick.limit())
	if _, ok := c.Unresponsive(); ok || c.dialer.refusal() != nil {
		t.Fatalf("a daemon that answers PINGs taken for unresponsive (cut: %v)", c.dialer.refusal())
	}
}

// A frozen daemon is unresponsive once nothing came for Interval*Count,
// since its last packet; a connection that reports it stays, and is
// responsive again when the daemon goes on and answers the PINGs it got.
func TestFrozenDaemonIsReportedWithinTheLimitAndThawsBack(t *testing.T) {
	s := libvirtxtest.New(t, "")
	c := dialKeepAlive(t, s, ReportSilence)
	thaw := s.Freeze()
	frozen := time.Now()
	waitUntil(t, "unresponsive", time.Second, func() bool { _, ok := c.Unresponsive(); return ok })
	took := time.Since(frozen)
	since, _ := c.Unresponsive()
	if took > quick.limit()+quick.Interval || took < quick.limit()-quick.Interval {
		t.Errorf("unresponsive %v after the freeze, want about %v", took, quick.limit())
	}
	if d := frozen.Sub(since); d < 0 || d > quick.Interval+10*time.Millisecond {
		t.Errorf("unresponsive since %v before the freeze, want the daemon's last packet", d)
	}
	time.Sleep(quick.limit())
	if c.dialer.refusal() != nil {
		t.Fatalf("a reporting connection was cut: %v", c.dialer.refusal())
	}
	thaw()
	waitUntil(t, "responsive again", time.Second, func() bool { _, ok := c.Unresponsive(); return !ok })
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatalf("a call once the daemon went on: %v", err)
	}
}

// A watching connection is cut at the limit, with the reason for every call.
func TestFrozenDaemonCutsAWatchingConnection(t *testing.T) {
	s := libvirtxtest.New(t, "")
	c := dialKeepAlive(t, s, CutOnSilence)
	defer s.Freeze()()
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		t.Fatal("not cut")
	}
	if err := c.dialer.refusal(); !errors.Is(err, ErrUnresponsive) {
		t.Fatalf("cut for %v, want ErrUnresponsive", err)
	}
	if _, err := c.Ping(context.Background()); !errors.Is(err, ErrUnresponsive) {
		t.Fatalf("a call on the cut connection: %v, want ErrUnresponsive", err)
	}
}

// A daemon without keepalive is never pinged nor called unresponsive.
func TestNoKeepAliveWithADaemonThatHasNone(t *testing.T) {
	s := libvirtxtest.New(t, "")
	s.NoKeepAlive()
	c, err := dial(context.Background(), s.Path(), time.Second, "", quick, CutOnSilence)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.KeepAliveOn() {
		t.Fatal("keepalive on though the daemon said no")
	}
	defer s.Freeze()()
	time.Sleep(2 * quick.limit())
	if _, ok := c.Unresponsive(); ok || s.KeepAlives(libvirtxtest.KeepAlivePing) != 0 || c.dialer.refusal() != nil {
		t.Fatalf("without keepalive: unresponsive %v, PINGs %d, cut %v", ok, s.KeepAlives(libvirtxtest.KeepAlivePing), c.dialer.refusal())
	}
}

// Calls in flight, some of them packets go-libvirt writes in several
// pieces, go on while the daemon pings hard: every PONG goes between two
// of go-libvirt's packets (the fake reads the stream packet by packet,
// and would answer nonsense otherwise), and every answer comes back.
func TestCallsGoOnWhilePingsInterleave(t *testing.T) {
	s := libvirtxtest.New(t, "")
	s.PingClients(time.Millisecond)
	// Timed loosely: what is tested is the interleaving, and a busy
	// machine under -race can hold a reader 150ms.
	c, err := dial(context.Background(), s.Path(), time.Second, "", KeepAlive{Interval: time.Second, Count: 5}, CutOnSilence)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := strings.Repeat("n", 64<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 8*20)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if g%2 == 0 {
					_, err := c.Ping(context.Background())
					errs <- err
					continue
				}
				_, err := c.l.DomainLookupByName(big)
				if !IsNoDomain(err) {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call while PINGs interleave: %v", err)
		}
	}
	if n := s.KeepAlives(libvirtxtest.KeepAlivePong); n == 0 {
		t.Fatal("no PONG was sent meanwhile")
	}
	if err := c.dialer.refusal(); err != nil {
		t.Fatalf("cut: %v", err)
	}
}

// Keepalive packets stop at framedConn: go-libvirt reads the replies
// alone, and a PING is answered on the socket.
func TestKeepAlivePacketsNeverReachGoLibvirt(t *testing.T) {
	reply := func(serial uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, 28+8)
		b = be32AppendHeader(b, rpcRemoteProgram, 157, rpcReply, serial, rpcStatusOK)
		return binary.BigEndian.AppendUint64(b, 11003000)
	}
	var stream, want []byte
	for s := uint32(1); s <= 3; s++ {
		stream = append(append(append(stream, pingPacket...), pongPacket...), reply(s)...)
		want = append(want, reply(s)...)
	}
	a, b := net.Pipe()
	fc := newFramedConn(a)
	k := &keepAlive{f: fc, out: make(chan []byte, 4), stop: make(chan struct{})}
	defer k.end()
	fc.ka.Store(k)
	go k.write()
	pongs := make(chan int, 1)
	go b.Write(stream)
	go func() {
		n := 0
		for buf := make([]byte, 28); n < 3; n++ {
			if _, err := io.ReadFull(b, buf); err != nil || !bytes.Equal(buf, pongPacket) {
				break
			}
		}
		pongs <- n
	}()
	defer b.Close()
	for s := uint32(1); s <= 3; s++ {
		fc.calls.expect(s, 157)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(iotest.OneByteReader(fc), got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("go-libvirt read %x, %v; want the replies alone %x", got, err, want)
	}
	if n := <-pongs; n != 3 {
		t.Fatalf("%d PONGs for 3 PINGs", n)
	}
}

// A packet of the keepalive program that libvirt would not send cuts the
// connection, as any packet not as libvirtd sends one does.
func TestMalformedKeepAliveIsRefused(t *testing.T) {
	s := libvirtxtest.New(t, "")
	c := dialKeepAlive(t, s, ReportSilence)
	bad := append(binary.BigEndian.AppendUint32(nil, 28+4), pingPacket[4:]...)
	s.Send(append(bad, 0, 0, 0, 1))
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		t.Fatal("a keepalive packet with a body was taken")
	}
	if err := c.dialer.refusal(); err == nil || !strings.Contains(err.Error(), "keepalive") {
		t.Fatalf("cut for %v", err)
	}
}

// The pool's connection is cut when its daemon goes silent, the socket
// shows it hung since the daemon's last packet until a connection is
// answered again, and a redial the frozen daemon never answers keeps it so.
func TestPoolShowsAHungDaemonUntilItAnswers(t *testing.T) {
	s := libvirtxtest.New(t, "")
	p, h, _ := runPool(t, PoolConfig{Sockets: []string{s.Path()}, CallTimeout: 100 * time.Millisecond,
		PingEvery: time.Hour, KeepAlive: quick, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	h.waitServed(t, s.Path())
	thaw := s.Freeze()
	frozen := time.Now()
	if err := h.waitLost(t, s.Path()); !errors.Is(err, ErrUnresponsive) {
		t.Fatalf("lost for %v, want ErrUnresponsive", err)
	}
	status := func() SocketStatus { return p.Status()[0] }
	if st := status(); st.Up || st.UnresponsiveSince.IsZero() || frozen.Sub(st.UnresponsiveSince) > quick.Interval {
		t.Fatalf("after the keepalive cut: %+v, want down and hung since about %v", st, frozen)
	}
	// Redials time out on the frozen daemon meanwhile: still hung.
	time.Sleep(500 * time.Millisecond)
	if st := status(); st.UnresponsiveSince.IsZero() || !strings.Contains(st.LastError, "did not answer") {
		t.Fatalf("while frozen: %+v", st)
	}
	thaw()
	h.waitServed(t, s.Path())
	if st := status(); !st.Up || !st.UnresponsiveSince.IsZero() {
		t.Fatalf("answered again: %+v", st)
	}
}

// A daemon that closes the connection (a restart) is down, never hung.
func TestPoolTakesAClosedConnectionForNoHang(t *testing.T) {
	s := libvirtxtest.New(t, "")
	p, h, _ := runPool(t, PoolConfig{Sockets: []string{s.Path()}, CallTimeout: 100 * time.Millisecond,
		PingEvery: time.Hour, KeepAlive: quick, BackoffMin: 10 * time.Millisecond})
	h.waitServed(t, s.Path())
	s.Close()
	h.waitLost(t, s.Path())
	if st := p.Status()[0]; !st.UnresponsiveSince.IsZero() {
		t.Fatalf("a closed connection taken for a hang: %+v", st)
	}
}

// A PING waits while go-libvirt is inside a packet it writes in pieces,
// and goes right after it.
func TestKeepAliveWritesOnlyBetweenPackets(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	fc := newFramedConn(a)
	defer fc.Close()
	var mu sync.Mutex
	var seen []byte
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := b.Read(buf)
			mu.Lock()
			seen = append(seen, buf[:n]...)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	got := func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return append([]byte(nil), seen...)
	}
	call := binary.BigEndian.AppendUint32(nil, 28+200)
	call = be32AppendHeader(call, rpcRemoteProgram, 23, 0, 1, rpcStatusOK)
	call = append(call, bytes.Repeat([]byte{'x'}, 200)...)
	if _, err := fc.Write(call[:40]); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() { sent <- fc.writeControl(pingPacket) }()
	time.Sleep(20 * time.Millisecond)
	if n := len(got()); n != 40 {
		t.Fatalf("%d bytes out while go-libvirt was inside its packet, want its 40 alone", n)
	}
	if _, err := fc.Write(call[40:]); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the PING out", time.Second, func() bool { return len(got()) == len(call)+len(pingPacket) })
	if want := append(append([]byte(nil), call...), pingPacket...); !bytes.Equal(got(), want) {
		t.Fatalf("wrote %x, want the call whole, then the PING", got())
	}
}
