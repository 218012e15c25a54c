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
	// Bounded as a recovery is: a peer that trickles bytes keeps the
	// migration's slot no longer.
	p.unregisterWhenStopped(e, id, why+"; its streams stopped", streamCheck, stillFor, maxRecoverSeconds*time.Second)
}

// drainWait bounds the wait for a finished post-copy's streams to close
// by themselves, looked at every drainCheck.
var (
	drainWait  = 10 * time.Second
	drainCheck = 50 * time.Millisecond
)

// unregisterWhenStopped ends id once QEMU has closed all its streams, or
// they carried nothing for still (0: not asked), or within has passed;
// it looks every check.
func (p *Proxy) unregisterWhenStopped(e *entry, id, why string, check, still, within time.Duration) {
	go func() {
		last, since, end := e.counters.moved(), time.Now(), time.Now().Add(within)
		for {
			time.Sleep(check)
			if n := e.counters.moved(); n != last {
				last, since = n, time.Now()
			}
			open, ended := p.reg.openConns(e)
			if ended {
				return
			}
			if open == 0 || still > 0 && time.Since(since) >= still || time.Now().After(end) {
				p.Unregister(id, why)
				return
			}
		}
	}()
}
