package proxy

import (
	"fmt"
	"net"
)

// MaxControlConnsPerPeer bounds the control connections one peer holds
// before their requests are read, so that one peer, however slowly it
// sends, leaves most of MaxControlConns to the others. A request read
// gives its slot back: what is served next is bounded by its own caps (a
// prepare by MaxIncoming, a finish by its migration), and a source retries
// a finish that was refused.
const MaxControlConnsPerPeer = 8

// peerKey tells peers apart: by certificate, or with TLS off by address.
func peerKey(peer Peer, raw net.Conn) string {
	if k := peer.owner(); k != "" {
		return k
	}
	return "addr:" + remoteAddr(raw).String()
}

// takeControlSlot takes one of the peer's control slots, or says why not;
// release gives it back, once.
func (p *Proxy) takeControlSlot(peer Peer, raw net.Conn) (release func(), err error) {
	key := peerKey(peer, raw)
	p.controlMu.Lock()
	defer p.controlMu.Unlock()
	if p.controlBy == nil {
		p.controlBy = map[string]int{}
	}
	if p.controlBy[key] >= MaxControlConnsPerPeer {
		return nil, fmt.Errorf("this peer already holds %d control connections whose requests are not read yet", MaxControlConnsPerPeer)
	}
	p.controlBy[key]++
	done := false
	return func() {
		p.controlMu.Lock()
		defer p.controlMu.Unlock()
		if done {
			return
		}
		done = true
		if p.controlBy[key]--; p.controlBy[key] <= 0 {
			delete(p.controlBy, key)
		}
	}, nil
}

// takeReserve takes one of the control connections kept beyond
// MaxControlConns for the finishes of prepared migrations, so that no
// other peer, by holding every ordinary connection, can keep a source
// from hearing its migration's outcome. A peer holds at most two per
// migration it prepared here that the registry still holds (a finish
// asked again while the first still waits on libvirt), and never more
// than twice its share of incoming migrations; all peers together hold
// at most twice MaxIncoming. Only a peer known by its certificate has
// any: without TLS, no peer can be told from another.
func (p *Proxy) takeReserve(peer Peer, raw net.Conn) (release func(), ok bool) {
	owner := peer.owner()
	if owner == "" {
		return nil, false
	}
	key := peerKey(peer, raw)
	allowed := min(2*p.reg.preparedFor(owner), 2*MaxIncomingPerPeer)
	p.controlMu.Lock()
	defer p.controlMu.Unlock()
	if p.reserveBy == nil {
		p.reserveBy = map[string]int{}
	}
	total := 0
	for _, n := range p.reserveBy {
		total += n
	}
	if p.reserveBy[key] >= allowed || total >= 2*MaxIncoming {
		return nil, false
	}
	p.reserveBy[key]++
	done := false
	return func() {
		p.controlMu.Lock()
		defer p.controlMu.Unlock()
		if done {
			return
		}
		done = true
		if p.reserveBy[key]--; p.reserveBy[key] <= 0 {
			delete(p.reserveBy, key)
		}
	}, true
}
