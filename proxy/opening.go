package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// MaxOpeningPerAddr bounds the connections one address may hold in their
// handshake or header, so that one address cannot fill MaxOpeningConns
// and lock the peers out.
const MaxOpeningPerAddr = 32

// open counts a connection still in its handshake or header, or says why
// it is one too many; release uncounts it, once.
func (p *Proxy) open(c net.Conn) (release func(), why string) {
	addr := remoteAddr(c)
	p.openingMu.Lock()
	defer p.openingMu.Unlock()
	if p.openingBy == nil {
		p.openingBy = map[netip.Addr]int{}
	}
	if p.opening.Load() >= MaxOpeningConns {
		return nil, fmt.Sprintf("more than %d connections in their handshake or header at once", MaxOpeningConns)
	}
	if p.openingBy[addr] >= MaxOpeningPerAddr {
		return nil, fmt.Sprintf("more than %d connections from %s in their handshake or header at once", MaxOpeningPerAddr, addr)
	}
	p.opening.Add(1)
	p.openingBy[addr]++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.openingMu.Lock()
			defer p.openingMu.Unlock()
			p.opening.Add(-1)
			if p.openingBy[addr]--; p.openingBy[addr] <= 0 {
				delete(p.openingBy, addr)
			}
		})
	}, ""
}

func remoteAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// logLimit lets one line through a second: refusals by the thousand must
// not flood the log.
type logLimit struct {
	mu   sync.Mutex
	last time.Time
}

func (l *logLimit) Allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.last) < time.Second {
		return false
	}
	l.last = time.Now()
	return true
}
