package proxy

import (
	"testing"
	"time"
)

func TestWireRateIsWhatThePathSustained(t *testing.T) {
	var c Counters
	t0 := time.Unix(1000, 0)
	at := t0
	send := func(mibs, seconds float64) {
		for range int(seconds * 10) {
			c.wire.add(int64(mibs*(1<<20))/10, at)
			at = at.Add(100 * time.Millisecond)
		}
	}
	send(200, 2) // the socket buffers filling: not counted
	send(40, 9)
	at = at.Add(time.Minute) // idle: says nothing
	send(40, 5)
	send(400, 1) // the final burst, in the last partial window
	got := float64(c.WireBytesPerSecond()) / (1 << 20)
	if got < 38 || got > 42 {
		t.Errorf("wire rate %.1f MiB/s, want about 40 (what the path sustained)", got)
	}
	var short Counters
	for i := range 30 { // 3 s: no whole window after the first
		short.wire.add(1<<20, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	if r := short.WireBytesPerSecond(); r != 0 {
		t.Errorf("wire rate %d of a stream too short to say", r)
	}
}
