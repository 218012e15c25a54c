package proxy

import (
	"fmt"
	"net"
	"time"
)

// A control request is read whole before it is acted on, up to
// MaxControlRequest, and decoded: a prepare's may hold some 10 MiB while
// it is read. Reading is bounded, per peer and in all, apart from how many
// control connections are held: a finish holds its connection as long as
// its migration, but reads a few bytes.
const (
	MaxReadingPerPeer = 2
	MaxReading        = 8
)

// startReading waits, until deadline, for a slot to read a request of the
// peer in; release gives it back, once.
func (p *Proxy) startReading(peer Peer, raw net.Conn, deadline time.Time) (release func(), err error) {
	key := peer.owner()
	if key == "" {
		// No TLS: the address is all there is to tell peers apart.
		key = "addr:" + remoteAddr(raw).String()
	}
	for {
		p.readingMu.Lock()
		if p.readingBy == nil {
			p.readingBy = map[string]int{}
		}
		if p.reading < MaxReading && p.readingBy[key] < MaxReadingPerPeer {
			p.reading++
			p.readingBy[key]++
			p.readingMu.Unlock()
			done := false
			return func() {
				if done {
					return
				}
				done = true
				p.readingMu.Lock()
				p.reading--
				if p.readingBy[key]--; p.readingBy[key] <= 0 {
					delete(p.readingBy, key)
				}
				p.readingMu.Unlock()
			}, nil
		}
		p.readingMu.Unlock()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("more than %d control requests of this peer, or %d in all, being read at once", MaxReadingPerPeer, MaxReading)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
