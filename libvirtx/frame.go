package libvirtx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
)

// Bounds of a libvirt RPC packet. Every packet starts with its total length
// as 4 big-endian bytes, the length word included, then a 24-byte header;
// libvirtd never sends more than VIR_NET_MESSAGE_MAX.
const (
	minPacket = 4 + 24
	maxPacket = 32 << 20
)

// framedConn reads whole packets and checks each before go-libvirt sees
// it. go-libvirt allocates length-28 bytes unchecked, and then whatever
// each array and string inside claims, so a socket that is not libvirtd
// (any pod can put one where the launcher glob looks) could make ferryd
// panic on a short length or run out of memory on a huge one. A bad
// packet fails the read and closes the connection instead; an event Ferry
// never subscribed to is skipped.
type framedConn struct {
	net.Conn
	packet []byte // the checked packet being handed on, length word included
	off    int
	err    error
	calls  rpcCalls
	// refused is why the connection was cut, for callers on other
	// goroutines: go-libvirt only says a call was interrupted.
	refused atomic.Pointer[error]
}

// refusal is the packet check that cut the connection, or nil.
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
	if n < minPacket || n > maxPacket {
		return c.refuse(fmt.Errorf("libvirt packet length %d outside [%d, %d]: not libvirtd", n, minPacket, maxPacket))
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
	switch err := checkPacket(c.packet[4:], &c.calls); {
	case errors.Is(err, errDropPacket):
		c.packet = c.packet[:0]
	case err != nil:
		return c.refuse(fmt.Errorf("libvirt packet refused: %w: not libvirtd, or not as it answers", err))
	}
	return nil
}

// Write notes each call go-libvirt sends, before it can be answered.
func (c *framedConn) Write(p []byte) (int, error) {
	c.calls.written(p)
	return c.Conn.Write(p)
}

func (c *framedConn) refuse(err error) error {
	c.err = err
	c.refused.Store(&err)
	c.Conn.Close()
	return err
}
