package proxy

import (
	"fmt"
	"net"
)

// MaxControlConnsPerPeer bounds the control connections one peer holds
// while its requests are read and answered, so that one peer, however
// slow its requests, leaves most of MaxControlConns to the others. A
// finish waiting on its migration gives its slot back: those are bounded
// by MaxIncoming already, and a peer's cancel must not wait behind them.
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
		return nil, fmt.Errorf("this peer already holds %d control connections with requests in progress", MaxControlConnsPerPeer)
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
