package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// MaxOpeningPerAddr bounds the connections one address may hold in their
// handshake or header, so that one address cannot fill MaxOpeningConns
// and lock the peers out.
const MaxOpeningPerAddr = 32

// openingKey is whom an opening connection is counted against: where it
// comes from, and whether from ferryd's own source ports (512-599, below
// 1024, which only a privileged process binds). ferryd dials its peers from
// one: those connections have a room of their own, which the others never
// take, so a local user on a peer's node, or anyone reaching the proxy port
// from many addresses, cannot crowd out the connections a peer's ferryd
// needs. A place is one host (an IPv4 address, all of loopback, an IPv6
// /64: one host has all of those); a privileged place may hold more at
// once (MaxOpeningPerPeerAddr), for a migration network's peers that
// share a /64.
type openingKey struct {
	from     netip.Prefix
	reserved bool
}

// ferrydPorts are the source ports ferryd dials its peers from.
const (
	ferrydPortMin = 512
	ferrydPortMax = 599
)

func keyOf(c net.Conn) openingKey {
	a := remoteAddr(c)
	port := remotePort(c)
	reserved := port >= ferrydPortMin && port <= ferrydPortMax
	bits := a.BitLen()
	switch {
	case a.Is4() && a.IsLoopback():
		bits = 8
	case a.Is6():
		bits = 64
	}
	from, _ := a.Prefix(bits)
	return openingKey{from: from, reserved: reserved}
}

func (k openingKey) String() string {
	from := k.from.String()
	if k.from.IsSingleIP() {
		from = k.from.Addr().String()
	}
	if k.reserved {
		return from + " (reserved ports)"
	}
	return from
}

// openingConn is a connection counted as opening; evicted once it was
// closed to make room. It notes whether its peer has sent anything yet.
type openingConn struct {
	net.Conn
	key     openingKey
	evicted bool
	heard   atomic.Bool
}

func (oc *openingConn) Read(b []byte) (int, error) {
	n, err := oc.Conn.Read(b)
	if n > 0 && !oc.heard.Load() {
		oc.heard.Store(true)
	}
	return n, err
}

// open counts a connection still in its handshake or header; release
// uncounts it, once; c is the connection to read from, which notes that
// the peer spoke. Past a cap, a connection still opening from the same
// place (or, past the cap of its room, one of that room) is closed to make
// room: the oldest that has not said a word, or if all have, the oldest.
// A refusal of the newest instead would let anyone who shares a node's
// address hold every slot with idle connections and lock the node's own
// ferryd out, finish included; a peer's real connection speaks at once
// and leaves this state within a round trip or two. why names what was
// closed for room, if anything, for the count and the log.
func (p *Proxy) open(raw net.Conn) (c net.Conn, release func(), why string) {
	key := keyOf(raw)
	p.openingMu.Lock()
	defer p.openingMu.Unlock()
	if p.openingBy == nil {
		p.openingBy = map[openingKey][]*openingConn{}
	}
	room := &p.openingRooms[0]
	if key.reserved {
		room = &p.openingRooms[1]
	}
	switch limit := key.limit(); {
	case len(p.openingBy[key]) >= limit:
		p.evictLocked(firstSilent(p.openingBy[key]))
		why = fmt.Sprintf("more than %d connections from %s in their handshake or header at once: one closed", limit, key)
	case len(*room) >= MaxOpeningConns:
		// Fair shares: room is made where the most are held.
		p.evictLocked(firstSilent(p.openingBy[p.largestLocked(key.reserved)]))
		why = fmt.Sprintf("more than %d connections in their handshake or header at once: one closed", MaxOpeningConns)
	}
	oc := &openingConn{Conn: raw, key: key}
	p.openingBy[key] = append(p.openingBy[key], oc)
	*room = append(*room, oc)
	var once sync.Once
	return oc, func() {
		once.Do(func() {
			p.openingMu.Lock()
			defer p.openingMu.Unlock()
			if !oc.evicted {
				p.dropOpeningLocked(oc)
			}
		})
	}, why
}

// MaxOpeningPerPeerAddr bounds the connections one place may hold in
// their handshake or header from ferryd's own source ports.
const MaxOpeningPerPeerAddr = 8 * MaxOpeningPerAddr

func (k openingKey) limit() int {
	if k.reserved {
		return MaxOpeningPerPeerAddr
	}
	return MaxOpeningPerAddr
}

// largestLocked is the place holding the most connections opening in the
// room of reserved (or other) ports.
func (p *Proxy) largestLocked(reserved bool) openingKey {
	var most openingKey
	n := -1
	for k, conns := range p.openingBy {
		if k.reserved == reserved && len(conns) > n {
			most, n = k, len(conns)
		}
	}
	return most
}

// firstSilent is the oldest of conns whose peer has sent nothing, or the
// oldest of all.
func firstSilent(conns []*openingConn) *openingConn {
	for _, oc := range conns {
		if !oc.heard.Load() {
			return oc
		}
	}
	return conns[0]
}

// evictLocked closes oc to make room.
func (p *Proxy) evictLocked(oc *openingConn) {
	p.dropOpeningLocked(oc)
	oc.evicted = true
	oc.Conn.Close()
}

func (p *Proxy) dropOpeningLocked(oc *openingConn) {
	p.openingBy[oc.key] = without(p.openingBy[oc.key], oc)
	if len(p.openingBy[oc.key]) == 0 {
		delete(p.openingBy, oc.key)
	}
	room := &p.openingRooms[0]
	if oc.key.reserved {
		room = &p.openingRooms[1]
	}
	*room = without(*room, oc)
}

func without(conns []*openingConn, oc *openingConn) []*openingConn {
	for i, x := range conns {
		if x == oc {
			return append(conns[:i:i], conns[i+1:]...)
		}
	}
	return conns
}

// remotePort is c's remote TCP port; 0 for anything else.
func remotePort(c net.Conn) int {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.Port
	}
	return 0
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

// openingCount is how many connections are still opening.
func (p *Proxy) openingCount() int {
	p.openingMu.Lock()
	defer p.openingMu.Unlock()
	return len(p.openingRooms[0]) + len(p.openingRooms[1])
}
