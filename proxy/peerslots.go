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
func peerKey(who Peer, raw net.Conn) string {
	if k := who.owner(); k != "" {
		return k
	}
	return "addr:" + remoteAddr(raw).String()
}

// takeControlSlot takes one of the peer's control slots, or says why not;
// release gives it back, once.
func (p *Proxy) takeControlSlot(who Peer, raw net.Conn) (release func(), err error) {
	p.controlMu.Lock()
	defer p.controlMu.Unlock()
	if p.controlBy == nil {
		p.controlBy = map[string]int{}
	}
	release, ok := p.countIn(p.controlBy, peerKey(who, raw), MaxControlConnsPerPeer)
	if !ok {
		return nil, fmt.Errorf("this peer already holds %d control connections whose requests are not read yet", MaxControlConnsPerPeer)
	}
	return release, nil
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
func (p *Proxy) takeReserve(who Peer, raw net.Conn) (release func(), ok bool) {
	owner := who.owner()
	if owner == "" {
		return nil, false
	}
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
	if total >= 2*MaxIncoming {
		return nil, false
	}
	return p.countIn(p.reserveBy, peerKey(who, raw), allowed)
}

// countIn counts one more for key in counts, below limit; release counts
// it out again, once. p.controlMu is held, and release takes it.
func (p *Proxy) countIn(counts map[string]int, key string, limit int) (release func(), ok bool) {
	if counts[key] >= limit {
		return nil, false
	}
	counts[key]++
	done := false
	return func() {
		p.controlMu.Lock()
		defer p.controlMu.Unlock()
		if done {
			return
		}
		done = true
		if counts[key]--; counts[key] <= 0 {
			delete(counts, key)
		}
	}, true
}
