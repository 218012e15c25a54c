package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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
func (p *Proxy) startReading(who Peer, raw net.Conn, deadline time.Time) (release func(), err error) {
	release, perPeer := p.reading.take(peerKey(who, raw), MaxReadingPerPeer, MaxReading, deadline)
	switch {
	case release != nil:
		return release, nil
	case perPeer:
		return nil, fmt.Errorf("%w: this peer already has %d large requests being read; waited for one to end", errBusyReading, MaxReadingPerPeer)
	}
	return nil, fmt.Errorf("%w: %d large requests of all peers already being read; waited for one to end", errBusyReading, MaxReading)
}

// MaxCheckingPerPeer bounds one peer's domain XML checks under way: the
// node runs two at once in all (see libvirtx), so one peer never holds
// both while another waits.
const MaxCheckingPerPeer = 1

// startChecking waits, until deadline, for the peer's turn to have a
// domain XML checked; release gives it back, once.
func (p *Proxy) startChecking(who Peer, raw net.Conn, deadline time.Time) (release func(), err error) {
	if release, _ := p.checking.take(peerKey(who, raw), MaxCheckingPerPeer, 0, deadline); release != nil {
		return release, nil
	}
	return nil, fmt.Errorf("%w: this peer already has %d domain XML check(s) under way; waited for one to end", errBusyReading, MaxCheckingPerPeer)
}

// turns hands out the right to do something costly for a peer, a few at
// a time per peer and in all, to whoever waits for one.
type turns struct {
	mu    sync.Mutex
	inAll int
	by    map[string]int
}

// take waits until deadline for one of perKey turns of key and of inAll
// turns in all (0: no bound in all); release gives it back, once. A nil
// release says none came, and perKeyBusy whether key's own share was what
// was taken.
func (t *turns) take(key string, perKey, inAll int, deadline time.Time) (release func(), perKeyBusy bool) {
	for {
		t.mu.Lock()
		if t.by == nil {
			t.by = map[string]int{}
		}
		perKeyBusy = t.by[key] >= perKey
		if !perKeyBusy && (inAll == 0 || t.inAll < inAll) {
			t.inAll++
			t.by[key]++
			t.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { t.give(key) }) }, false
		}
		t.mu.Unlock()
		if time.Now().After(deadline) {
			return nil, perKeyBusy
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (t *turns) give(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inAll--
	if t.by[key]--; t.by[key] <= 0 {
		delete(t.by, key)
	}
}
