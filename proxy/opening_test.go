package proxy

import (
	"fmt"
	"net"
	"testing"
)

// addrConn is a connection that says where it comes from, and whether it
// was closed.
type addrConn struct {
	net.Conn
	from   *net.TCPAddr
	closed bool
}

func (c *addrConn) RemoteAddr() net.Addr { return c.from }
func (c *addrConn) Close() error         { c.closed = true; return nil }

func fromAddr(ip string, port int) *addrConn {
	return &addrConn{from: &net.TCPAddr{IP: net.ParseIP(ip), Port: port}}
}

// Connections opening from many addresses (a host with a /64, or with
// every loopback address) fill the room for ephemeral ports and close the
// oldest of it for room, but never a peer ferryd's, which come from a
// reserved port and have a room of their own.
func TestStrangersFromManyAddressesNeverCloseAPeersConnections(t *testing.T) {
	p := &Proxy{}
	who := fromAddr("10.77.0.1", 550)
	if _, _, why := p.open(who); why != "" {
		t.Fatal(why)
	}
	for i := range 3 * MaxOpeningConns {
		p.open(fromAddr(net.IPv4(10, 1, byte(i>>8), byte(i)).String(), 40000))
		p.open(fromAddr(fmt.Sprintf("2001:db8:%x::1", i), 40000))
	}
	if who.closed {
		t.Fatal("a peer's connection from a reserved port was closed for strangers' room")
	}
	if n := len(p.openingRooms[0]); n != MaxOpeningConns {
		t.Errorf("%d strangers' connections opening, want the cap %d", n, MaxOpeningConns)
	}
}

// One host is one place, however many addresses it speaks from.
func TestOneHostIsCountedAsOnePlace(t *testing.T) {
	for _, c := range []struct{ a, b string }{{"127.0.0.1", "127.3.2.1"}, {"2001:db8::1", "2001:db8::ffff:1"}} {
		if ka, kb := keyOf(fromAddr(c.a, 40000)), keyOf(fromAddr(c.b, 40000)); ka != kb {
			t.Errorf("%s and %s counted apart: %v, %v", c.a, c.b, ka, kb)
		}
	}
	if keyOf(fromAddr("10.0.0.1", 40000)) == keyOf(fromAddr("10.0.0.2", 40000)) {
		t.Error("two IPv4 hosts counted as one")
	}
	if keyOf(fromAddr("10.0.0.1", 550)) == keyOf(fromAddr("10.0.0.1", 40000)) {
		t.Error("ferryd's own source port counted with the others")
	}
	if keyOf(fromAddr("10.0.0.1", 1000)).reserved {
		t.Error("a privileged port outside ferryd's range counted as ferryd's")
	}
	if keyOf(fromAddr("2001:db8::1", 550)).limit() <= MaxOpeningPerAddr {
		t.Error("a privileged place may hold no more than any other")
	}
}

// spoke marks an opening connection as one whose peer has sent its first
// bytes (a ferryd's ClientHello, at once).
func spoke(c net.Conn) { c.(*openingConn).heard.Store(true) }

// Root on other hosts, or a container allowed to bind low ports, dials
// from privileged ports too: from ports outside ferryd's own range it
// never reaches the peers' room; from inside it, a peer ferryd's
// connection, which speaks at once, is never the one closed for the room
// while silent ones hold it, from other addresses or from its own.
func TestPrivilegedStrangersNeverCloseAPeerThatSpoke(t *testing.T) {
	for name, flood := range map[string]func(i, j int) *addrConn{
		"other ports, other hosts":    func(i, _ int) *addrConn { return fromAddr(net.IPv4(10, 9, 0, byte(i)).String(), 1000) },
		"ferryd's ports, other hosts": func(i, j int) *addrConn { return fromAddr(net.IPv4(10, 9, 0, byte(i)).String(), 512+j) },
		"ferryd's ports, its node":    func(_, j int) *addrConn { return fromAddr("10.77.0.1", 512+j%88) },
	} {
		p := &Proxy{}
		who := fromAddr("10.77.0.1", 550)
		c, _, _ := p.open(who)
		spoke(c)
		for i := range 2*MaxOpeningConns/MaxOpeningPerAddr + 1 {
			for j := range MaxOpeningPerAddr {
				p.open(flood(i, j))
			}
		}
		if who.closed {
			t.Errorf("%s: a peer ferryd's connection that spoke was closed for silent ones", name)
		}
	}
}

// A privileged host whose idle connections each send a byte, so that they
// count as having spoken, fills the peers' room from ever more addresses
// of many /64s: room is made where the most are held, so a peer ferryd's
// connection from another host is not the one closed.
func TestAPrivilegedFloodThatSpeaksClosesItsOwnFirst(t *testing.T) {
	p := &Proxy{}
	who := fromAddr("10.77.0.1", 550)
	c, _, _ := p.open(who)
	spoke(c)
	for i := range 2 * MaxOpeningConns {
		fc, _, _ := p.open(fromAddr(fmt.Sprintf("2001:db8:%x::%x", i%40, i+1), 512+i%88))
		spoke(fc)
	}
	if who.closed {
		t.Fatal("a peer ferryd's connection was closed for a flood that speaks")
	}
	if n := len(p.openingRooms[1]); n > MaxOpeningConns {
		t.Errorf("%d connections in the peers' room, over its %d", n, MaxOpeningConns)
	}
}
