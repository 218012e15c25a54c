package libvirtx

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"testing/iotest"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/internal/testsock"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// liar answers every call with a packet whose length word is length,
// followed by a few bytes that would pass for a header.
func liar(t *testing.T, length uint32) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "libvirt-sock")
	testsock.Serve(t, path, func(c net.Conn) {
		var hdr [28]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[:4]))-28)
		out := binary.BigEndian.AppendUint32(nil, length)
		c.Write(append(out, make([]byte, 64)...))
		testsock.Hold(c)
	})
	return path
}

func TestDialRefusesBadPacketLengths(t *testing.T) {
	for _, length := range []uint32{0, 27, 1 << 31} {
		path := liar(t, length)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := Dial(ctx, path, 2*time.Second)
		cancel()
		if err == nil {
			c.Close()
			t.Fatalf("length %d: Dial succeeded", length)
		}
	}
}

// A call on a good connection fails, rather than panics, when a bad length
// comes later.
func TestCallFailsOnBadPacketLength(t *testing.T) {
	f := libvirtxtest.New(t, "")
	c, err := Dial(context.Background(), f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f.Send(be32(0))
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not dropped after a zero length")
	}
	if _, err := c.Ping(context.Background()); err == nil {
		t.Fatal("ping succeeded on a dropped connection")
	}
}

func TestFakeLibvirtWorksThroughFraming(t *testing.T) {
	f := libvirtxtest.New(t, "")
	big := bytes.Repeat([]byte("x"), 3*4096+5) // spans several bufio reads
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcDomainGetMaxMemory {
			return nil, &libvirt.Error{Code: uint32(libvirt.ErrNoDomain), Message: string(big)}, true
		}
		return nil, nil, false
	})
	c, err := Dial(context.Background(), f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 3; i++ {
		if v, err := c.Ping(context.Background()); err != nil || v != 11003000 {
			t.Fatalf("ping %d: %d, %v", i, v, err)
		}
		_, err := c.l.DomainGetMaxMemory(libvirt.Domain{Name: "d"})
		var le libvirt.Error
		if !errors.As(err, &le) || len(le.Message) != len(big) {
			t.Fatalf("big error reply: %v", err)
		}
	}
}

// Packets come through whole and in order however the reads are cut.
func TestFramedConnSplitsAtPacketBoundaries(t *testing.T) {
	// Replies to a domain-XML call, whose payload is one string.
	serial := uint32(0)
	pkt := func(n int) []byte {
		serial++
		b := binary.BigEndian.AppendUint32(nil, uint32(n))
		b = be32AppendHeader(b, rpcRemoteProgram, 14, rpcReply, serial, rpcStatusOK)
		s := n - len(b) - 4
		b = binary.BigEndian.AppendUint32(b, uint32(s))
		return append(b, bytes.Repeat([]byte{'x'}, s)...)
	}
	want := append(append(pkt(32), pkt(100)...), pkt(5000)...)
	a, b := net.Pipe()
	go func() { b.Write(want); b.Close() }()
	fc := newFramedConn(a)
	for s := uint32(1); s <= 3; s++ {
		fc.calls.expect(s, 14)
	}
	got, err := io.ReadAll(iotest.OneByteReader(fc))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, %v; want %d", len(got), err, len(want))
	}
}

func be32AppendHeader(b []byte, prog, proc, typ, serial, status uint32) []byte {
	for _, v := range []uint32{prog, 1, proc, typ, serial, status} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}
