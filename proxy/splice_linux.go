package proxy

import (
	"errors"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// spliceChunk is how much one splice call may move; the pipe is grown to
// match so a chunk never waits on pipe space.
const spliceChunk = 1 << 20

// spliceCopy moves bytes from src to dst through a pipe with splice(2): the
// kernel moves pages between the two sockets and nothing is copied through
// user space. count is called after every chunk so byte counters stay live.
func spliceCopy(dst, src syscall.Conn, count func(int64)) (int64, error) {
	srcRaw, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	dstRaw, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return 0, err
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, spliceChunk) // best effort: default pipes hold 64 KiB

	var total int64
	for {
		var n int64
		var serr error
		rerr := srcRaw.Read(func(fd uintptr) bool {
			n, serr = unix.Splice(int(fd), nil, p[1], nil, spliceChunk, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			// The pipe is empty here, so EAGAIN means the socket has
			// nothing to read yet: wait for it.
			return !errors.Is(serr, unix.EAGAIN)
		})
		if rerr != nil {
			return total, rerr
		}
		if serr != nil {
			return total, serr
		}
		if n == 0 {
			return total, nil // EOF
		}
		for n > 0 {
			var m int64
			var werr error
			err := dstRaw.Write(func(fd uintptr) bool {
				m, werr = unix.Splice(p[0], nil, int(fd), nil, int(n), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				// The pipe holds data, so EAGAIN means the socket is full.
				return !errors.Is(werr, unix.EAGAIN)
			})
			if err != nil {
				return total, err
			}
			if werr != nil {
				return total, werr
			}
			if m == 0 {
				return total, io.ErrShortWrite
			}
			n -= m
			total += m
			count(m)
		}
	}
}
