package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// A control request is read whole before it is acted on, up to
// MaxControlRequest, and decoded: a prepare's may hold some 10 MiB while
// it is read. The requests past readGate being read are bounded, per peer
// and in all, apart from how many control connections are held: a finish
// or a cancel is a few hundred bytes and never waits behind a prepare.
const (
	MaxReadingPerPeer = 2
	MaxReading        = 4
	readGate          = 64 << 10
)

var errBusyReading = errors.New("control requests being read")

// gatedReader reads up to readGate freely, then only with a reading slot.
type gatedReader struct {
	r       io.Reader
	read    int
	acquire func() (release func(), err error)
	held    func()
}

func (g *gatedReader) Read(b []byte) (int, error) {
	if g.held == nil && g.read >= readGate {
		release, err := g.acquire()
		if err != nil {
			return 0, err
		}
		g.held = release
	}
	if g.held == nil && len(b) > readGate-g.read {
		b = b[:readGate-g.read]
	}
	n, err := g.r.Read(b)
	g.read += n
	return n, err
}

// release gives the slot back, if one was taken; once.
func (g *gatedReader) release() {
	if g.held != nil {
		g.held()
		g.held = nil
	}
}

// startReading waits, until deadline, for a slot to read a large request
// of the peer in; release gives it back, once.
func (p *Proxy) startReading(peer Peer, raw net.Conn, deadline time.Time) (release func(), err error) {
	key := peerKey(peer, raw)
	for {
		p.readingMu.Lock()
		if p.readingBy == nil {
			p.readingBy = map[string]int{}
		}
		perPeer, inAll := p.readingBy[key] >= MaxReadingPerPeer, p.reading >= MaxReading
		if !perPeer && !inAll {
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
			if perPeer {
				return nil, fmt.Errorf("%w: this peer already has %d large requests being read; waited for one to end", errBusyReading, MaxReadingPerPeer)
			}
			return nil, fmt.Errorf("%w: %d large requests of all peers already being read; waited for one to end", errBusyReading, MaxReading)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
