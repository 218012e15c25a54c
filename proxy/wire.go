package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// maxRecord is the most a TLS record takes on the wire: 16 KiB of payload,
// up to 2 KiB of expansion (TLS 1.2 allows that much; 1.3, 256 bytes), and
// its 5-byte header.
const maxRecord = 16<<10 + 2048 + 5

// wireReadBuffer is how much of the socket under TLS one read takes: four
// whole records, a quarter of the syscalls of Go's TLS alone.
const wireReadBuffer = 4 * maxRecord

// errFlushing refuses a TLS write that would wait behind a relayed chunk
// the peer is not reading (see wire.Write).
var errFlushing = errors.New("the connection's socket is taken by a relayed chunk the peer has not read")

// wire is the socket under a relayed TLS connection. Go's TLS reads and
// writes the socket one record (at most 16 KiB) at a time, so a relay
// moving a migration stream would make two system calls for every 16 KiB
// in each proxy. Once relaying starts, wire reads the socket in chunks of
// several records, and while the relay writes one chunk through TLS it
// gathers the records into a single write. Nothing is held back across
// calls: every batch is written before the relay's Write returns, so
// latency-bound traffic (post-copy's page requests) waits no longer than
// before.
type wire struct {
	net.Conn

	r *bufio.Reader // nil until the relay starts: headers read straight

	mu       sync.Mutex // orders socket writes; guards the fields below
	batching bool
	out      *[]byte
	flushing atomic.Bool
}

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, wireReadBuffer) }}
	batchPool  = sync.Pool{New: func() any { b := make([]byte, 0, relayBuffer+relayBuffer/maxRecord*256+4096); return &b }}
)

// relaying switches to chunked reads. It is called before the relay's
// first read and done after its last, so no read is in flight at either.
func (w *wire) relaying() (done func()) {
	w.r = readerPool.Get().(*bufio.Reader)
	w.r.Reset(w.Conn)
	return func() {
		r := w.r
		w.r = nil
		r.Reset(nil)
		readerPool.Put(r)
	}
}

func (w *wire) Read(p []byte) (int, error) {
	if w.r == nil {
		return w.Conn.Read(p)
	}
	return w.r.Read(p)
}

// recordReady: a whole record is already read, so TLS can return the next
// one without waiting on the network.
func (w *wire) recordReady() bool {
	return w.r != nil && w.r.Buffered() >= maxRecord
}

// Write queues TLS's records while a relay's chunk is being batched, and
// writes them through otherwise. A write that would wait behind a batch
// already going out fails at once instead: that is TLS's close_notify or
// an alert, sent as a relay is cut, and a peer that has stopped reading
// would hold it (and the Close waiting on it) for TLS's 5 s.
func (w *wire) Write(p []byte) (int, error) {
	if !w.mu.TryLock() {
		if w.flushing.Load() {
			return 0, errFlushing
		}
		w.mu.Lock()
	}
	defer w.mu.Unlock()
	if w.batching {
		*w.out = append(*w.out, p...)
		return len(p), nil
	}
	return w.Conn.Write(p)
}

// writeThrough writes p through tc as one socket write. Records TLS writes
// meanwhile from another goroutine (an alert) queue behind this batch,
// in the order TLS made them.
func (w *wire) writeThrough(tc *tls.Conn, p []byte) (int, error) {
	w.mu.Lock()
	w.batching = true
	w.out = batchPool.Get().(*[]byte)
	w.mu.Unlock()
	n, err := tc.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batching = false
	out := w.out
	w.out = nil
	defer func() {
		*out = (*out)[:0]
		batchPool.Put(out)
	}()
	if len(*out) > 0 {
		w.flushing.Store(true)
		_, werr := w.Conn.Write(*out)
		w.flushing.Store(false)
		if err == nil && werr != nil {
			n, err = 0, werr
		}
	}
	return n, err
}

// wireOf is the wire under c, if c is a TLS connection over one.
func wireOf(c net.Conn) (*tls.Conn, *wire) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil
	}
	w, ok := tc.NetConn().(*wire)
	if !ok {
		return nil, nil
	}
	return tc, w
}
