package proxy

import (
	"time"
)

// libvirt's Finish failing says nothing of the post-copy stream: QEMU's
// stream never passes through libvirtd (a target libvirtd restarted in
// post-copy fails the call while both QEMUs go on, and libvirt completes
// the migration unattended once it is back). Cutting the stream then
// would split a guest that was about to run whole. So the streams of a
// post-copy whose Finish failed stay until the stream itself stops:
// QEMU closed every connection, or nothing moved for stillFor (a silent
// link, which QEMU takes for broken too).

// stillFor is how long a post-copy stream carries nothing before it is
// taken for stopped.
var stillFor = 30 * time.Second

// streamCheck is how often such a stream is looked at.
var streamCheck = 2 * time.Second

// moved is every byte the migration's streams carried, both ways.
func (c *Counters) moved() uint64 {
	var n uint64
	for i := range c.ToTarget {
		n += c.ToTarget[i].Load() + c.FromTarget[i].Load()
	}
	return n
}

// openConns is how many of e's streams are open, and whether e has ended.
func (r *registry) openConns(e *entry) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(e.conns), e.ended != ""
}

// unregisterOnceStill ends id once its streams have stopped moving.
func (p *Proxy) unregisterOnceStill(e *entry, id, why string) {
	still, check := stillFor, streamCheck
	go func() {
		last, since := e.counters.moved(), time.Now()
		// Bounded as a recovery is: a peer that trickles bytes keeps the
		// migration's slot no longer.
		end := time.Now().Add(maxRecoverSeconds * time.Second)
		for {
			time.Sleep(check)
			if n := e.counters.moved(); n != last {
				last, since = n, time.Now()
			}
			open, ended := p.reg.openConns(e)
			if ended {
				return
			}
			if open == 0 || time.Since(since) >= still || time.Now().After(end) {
				p.Unregister(id, why+"; its streams stopped")
				return
			}
		}
	}()
}

// drainWait bounds the wait for a finished post-copy's streams to close
// by themselves.
var drainWait = 10 * time.Second

// unregisterOnceClosed ends id once QEMU has closed all its streams, or
// after within.
func (p *Proxy) unregisterOnceClosed(e *entry, id, why string, within time.Duration) {
	go func() {
		for end := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
			open, ended := p.reg.openConns(e)
			if ended {
				return
			}
			if open == 0 || time.Now().After(end) {
				p.Unregister(id, why)
				return
			}
		}
	}()
}
