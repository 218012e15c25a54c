package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// relayBuffer is the copy buffer for connections splice cannot serve (TLS).
const relayBuffer = 256 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, relayBuffer); return &b }}

// closeWriter is implemented by TCP, unix and TLS connections.
type closeWriter interface{ CloseWrite() error }

// relay copies between a and b in both directions until both have ended.
// When one side finishes sending, the other side's write half is closed
// (half-close is passed on, as a migration stream expects); on any error
// both connections are closed so the opposite copy ends too. aToB and bToA
// count the bytes moved each way.
func relay(a, b net.Conn, aToB, bToA func(int64)) error {
	for _, c := range []net.Conn{a, b} {
		if _, w := wireOf(c); w != nil {
			defer w.relaying()()
		}
	}
	errc := make(chan error, 2)
	go func() { errc <- copyHalf(b, a, aToB) }()
	go func() { errc <- copyHalf(a, b, bToA) }()
	first := <-errc
	if first != nil {
		a.Close()
		b.Close()
		<-errc
		return first
	}
	second := <-errc
	a.Close()
	b.Close()
	return second
}

// copyHalf moves src to dst until src ends, then half-closes dst.
func copyHalf(dst, src net.Conn, count func(int64)) error {
	var err error
	if canSplice(dst) && canSplice(src) {
		_, err = spliceCopy(dst.(syscall.Conn), src.(syscall.Conn), count)
	} else {
		err = bufferedCopy(dst, src, count)
	}
	if err != nil {
		return err
	}
	if cw, ok := dst.(closeWriter); ok {
		if err := cw.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
	}
	return nil
}

// canSplice: splice(2) needs kernel sockets on both ends, no TLS in between.
func canSplice(c net.Conn) bool {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// bufferedCopy copies through user space, where one side is TLS. From TLS
// it takes every record already read before writing; into TLS it writes
// each chunk as one socket write (see wire).
func bufferedCopy(dst, src net.Conn, count func(int64)) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	_, from := wireOf(src)
	write := dst.Write
	if tc, w := wireOf(dst); w != nil {
		write = func(p []byte) (int, error) { return w.writeThrough(tc, p) }
	}
	for {
		n, rerr := src.Read(buf)
		for rerr == nil && from != nil && len(buf)-n >= 16<<10 && from.recordReady() {
			var m int
			m, rerr = src.Read(buf[n:])
			n += m
		}
		if n > 0 {
			if _, werr := write(buf[:n]); werr != nil {
				return werr
			}
			count(int64(n))
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
