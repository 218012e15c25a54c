package libvirtx

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// Bounds of a libvirt RPC packet. Every packet starts with its total length
// as 4 big-endian bytes, the length word included, then a 24-byte header;
// libvirtd never sends more than VIR_NET_MESSAGE_MAX.
const (
	minPacket = 4 + 24
	maxPacket = 32 << 20
)

// framedConn checks every packet length before go-libvirt sees it. go-libvirt
// allocates length-28 bytes unchecked, so a socket that is not libvirtd (any
// pod can put one where the launcher glob looks) could make ferryd panic on
// a short length or run out of memory on a huge one. A bad length fails the
// read and closes the connection instead.
type framedConn struct {
	net.Conn
	left    uint32 // payload bytes of the current packet not yet read
	pending []byte // length word already checked but not yet handed on
	lenBuf  [4]byte
	err     error
}

func (c *framedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.pending) == 0 && c.left == 0 {
		if _, err := io.ReadFull(c.Conn, c.lenBuf[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(c.lenBuf[:])
		if n < minPacket || n > maxPacket {
			c.err = fmt.Errorf("libvirt packet length %d outside [%d, %d]: not libvirtd", n, minPacket, maxPacket)
			c.Conn.Close()
			return 0, c.err
		}
		c.pending, c.left = c.lenBuf[:], n-4
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	if uint32(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= uint32(n)
	return n, err
}
