package libvirtx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of a libvirt RPC packet. Every packet starts with its total length
// as 4 big-endian bytes, the length word included, then a 24-byte header;
// libvirtd never sends more than VIR_NET_MESSAGE_MAX.
const (
	minPacket = 4 + 24
	maxPacket = 32 << 20
)

// maxLauncherPacket bounds a packet from a socket the glob matched. A
// launcher's libvirt runs one VM, and the largest answers Ferry asks of it
// are that VM's: its XML (tens of KiB, a few hundred with hundreds of
// devices), a migration cookie carrying it, one domain's stats (at most
// xdrDirtyRateStatsMax parameters, about 100 KiB), job stats (64
// parameters), a QMP answer to query-migrate; the host's capabilities are
// under 1 MiB on the largest hosts. Any pod can serve a libvirt there, and
// one answering each listing with libvirt's 32 MiB cost ferryd over 100
// MiB per listing (the packet buffered here, copied by go-libvirt,
// decoded) before a domain was counted.
const maxLauncherPacket = 4 << 20

// errLauncherPacket marks a packet refused for its size on a launcher's
// socket.
var errLauncherPacket = errors.New("over what a launcher's libvirt, one VM's, ever sends: not a launcher")

// framedConn reads whole packets and checks each before go-libvirt sees
// it. go-libvirt allocates length-28 bytes unchecked, and then whatever
// each array and string inside claims, so a socket that is not libvirtd
// (any pod can put one where the launcher glob looks) could make ferryd
// panic on a short length or run out of memory on a huge one. A bad
// packet fails the read and closes the connection instead; an event Ferry
// never subscribed to is skipped.
type framedConn struct {
	net.Conn
	socket string // named in refusals
	limit  uint32 // the largest packet taken, at most maxPacket
	packet []byte // the checked packet being handed on, length word included
	off    int
	err    error
	calls  rpcCalls
	// refused is why Ferry cut the connection (a packet check, the
	// keepalive), for callers on other goroutines: go-libvirt only says a
	// call was interrupted.
	refused atomic.Pointer[error]
	// heard is when libvirtd last sent a packet, any packet: libvirt's
	// own sign of life (see keepalive.go).
	heard atomic.Int64
	// ka answers libvirtd's PINGs once the connection asked for them.
	ka atomic.Pointer[keepAlive]

	// wmu orders writes: go-libvirt's packets (one may come in several
	// writes, under go-libvirt's own lock) and keepalive's, which go in
	// only between two of go-libvirt's.
	wmu      sync.Mutex
	boundary *sync.Cond // signalled when go-libvirt's stream is between packets
	wbroken  bool       // a write failed or the connection closed: no boundary will come
}

func newFramedConn(c net.Conn) *framedConn {
	f := &framedConn{Conn: c, limit: maxPacket}
	f.boundary = sync.NewCond(&f.wmu)
	f.markHeard()
	return f
}

// monoEpoch makes heard a monotonic reading: wall-clock steps do not
// shorten or stretch a silence.
var monoEpoch = time.Now()

func (c *framedConn) markHeard() { c.heard.Store(int64(time.Since(monoEpoch))) }

// heardAt is when libvirtd last sent anything.
func (c *framedConn) heardAt() time.Time { return monoEpoch.Add(time.Duration(c.heard.Load())) }

// refusal is why Ferry cut the connection, or nil.
func (c *framedConn) refusal() error {
	if p := c.refused.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *framedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for c.off == len(c.packet) {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.packet[c.off:])
	c.off += n
	return n, nil
}

// next reads and checks packets until one is to be handed on.
func (c *framedConn) next() error {
	var lenBuf [4]byte
	if _, err := io.ReadFull(c.Conn, lenBuf[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	if err := c.checkLength(n); err != nil {
		return c.refuse(err)
	}
	if cap(c.packet) < int(n) || cap(c.packet) > 1<<20 && int(n) <= 1<<20 {
		// Keep a small buffer between large packets, not the largest seen.
		c.packet = make([]byte, n)
	}
	c.packet, c.off = c.packet[:n], 0
	copy(c.packet, lenBuf[:])
	if _, err := io.ReadFull(c.Conn, c.packet[4:]); err != nil {
		return err
	}
	c.markHeard()
	if isKeepAlive(c.packet[4:]) {
		// libvirt's keepalive is below RPC: go-libvirt would take a PING
		// for an answer to its call of serial 0.
		err := c.keepAliveMessage(c.packet[4:])
		c.packet = c.packet[:0]
		if err != nil {
			return c.refuse(err)
		}
		return nil
	}
	switch err := checkPacket(c.packet[4:], &c.calls); {
	case errors.Is(err, errDropPacket):
		c.packet = c.packet[:0]
	case err != nil:
		return c.refuse(fmt.Errorf("libvirt packet refused: %w: not libvirtd, or not as it answers", err))
	}
	return nil
}

// checkLength refuses a packet by its length word, before a byte more of
// it is read or a buffer made for it.
func (c *framedConn) checkLength(n uint32) error {
	if n < minPacket || n > maxPacket {
		return fmt.Errorf("libvirt packet length %d outside [%d, %d]: not libvirtd", n, minPacket, maxPacket)
	}
	if n > c.limit {
		return fmt.Errorf("libvirt packet of %d bytes from %s, over %d: %w", n, c.socket, c.limit, errLauncherPacket)
	}
	return nil
}

// Write notes each call go-libvirt sends, before it can be answered.
func (c *framedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.calls.written(p)
	n, err := c.Conn.Write(p)
	if err != nil {
		c.wbroken = true
	}
	if c.wbroken || c.calls.between() {
		c.boundary.Broadcast()
	}
	return n, err
}

// writeControl writes a whole packet of Ferry's own between two of
// go-libvirt's, never inside one.
func (c *framedConn) writeControl(p []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for !c.wbroken && !c.calls.between() {
		c.boundary.Wait()
	}
	if c.wbroken {
		return net.ErrClosed
	}
	// A peer that stops reading never holds a keepalive answer, nor the
	// lock, for longer than this.
	c.Conn.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
	_, err := c.Conn.Write(p)
	c.Conn.SetWriteDeadline(time.Time{})
	if err != nil {
		c.wbroken = true
	}
	return err
}

// controlWriteTimeout bounds one keepalive packet's write.
const controlWriteTimeout = 5 * time.Second

// Close closes the socket first, which fails a write blocked on a peer
// that stopped reading (it holds wmu), then wakes a keepalive write
// waiting for a packet boundary that will not come.
func (c *framedConn) Close() error {
	err := c.Conn.Close()
	c.wmu.Lock()
	c.wbroken = true
	c.boundary.Broadcast()
	c.wmu.Unlock()
	return err
}

func (c *framedConn) refuse(err error) error {
	c.err = err
	c.cutFor(err)
	return err
}

// cutFor closes the connection and keeps why, for every caller to see.
func (c *framedConn) cutFor(err error) {
	c.refused.Store(&err)
	c.Close()
}
