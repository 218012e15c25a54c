package proxy

import (
	"slices"
	"sync"
	"time"
)

// wireWindow is how long a stretch of relayed bytes is timed over.
const wireWindow = 2 * time.Second

// wireWindows bounds the windows kept of one migration.
const wireWindows = 256

// wireRate is the rate a migration's memory went to the target at, window
// by window: what the path sustained. The first window is not counted
// (the socket buffers fill in it), nor the last, partial one (the final
// stop-and-copy runs without QEMU's cap). The bytes are those the local
// kernel took for sending; over whole windows after the first, that is
// what the path carried.
type wireRate struct {
	mu      sync.Mutex
	start   time.Time
	bytes   uint64
	first   bool // the first window has ended
	windows []uint64
}

func (w *wireRate) add(n int64, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.start.IsZero() {
		w.start = now
	}
	w.bytes += uint64(n)
	el := now.Sub(w.start)
	if el < wireWindow {
		return
	}
	// A window the stream sat idle through says nothing of the path.
	if el < 2*wireWindow && w.first && len(w.windows) < wireWindows {
		w.windows = append(w.windows, uint64(float64(w.bytes)/el.Seconds()))
	}
	w.first = true
	w.start, w.bytes = now, 0
}

// WireBytesPerSecond is the rate at which this migration's memory went to
// the target, as the path sustained it: the median of its whole 2 s
// windows after the first; 0 when it never ran that long.
func (c *Counters) WireBytesPerSecond() uint64 {
	w := &c.wire
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.windows) == 0 {
		return 0
	}
	s := slices.Clone(w.windows)
	slices.Sort(s)
	return s[len(s)/2]
}
