package libvirtx

import (
	"fmt"
	"sync/atomic"
	"time"
)

// go-libvirt cannot cancel a call: one its caller gave up on keeps a
// goroutine (callWithin's), go-libvirt's channel for its serial and
// framedConn's note of it until libvirt answers or the connection closes.
// A daemon that answers keepalive, so that the connection looks alive, and
// never a call would have them pile up, one per call, for as long as the
// connection lives: any pod can serve one where the launcher glob looks.
// So no new call is sent on a connection while maxUnanswered calls given
// up on are unanswered; what waits on it is at most those and the calls
// its callers had made at once (the check and the count are not one step,
// so a few callers at once may each pass it). A pod's socket the pool
// watches (CutOnSilence, found by the glob) is cut there instead, which
// ends every call waiting on it, and the pool reconnects.
//
// The node's own libvirtd is never cut for it: a real libvirtd reads at
// most max_client_requests (5) of a client's calls at a time and holds a
// worker for each, so a cut and a fresh connection would only pin more of
// its 20 workers to whatever hangs (an NFS mount); and it answers late
// often enough: a call that needs a job on a domain in an incoming
// migration waits out libvirt's 30 s job timeout.
const maxUnanswered = 3

// ErrUnanswered marks a call not made, or a connection cut, because
// maxUnanswered calls on it were given up on and are still unanswered.
var ErrUnanswered = fmt.Errorf("%w: %d calls given up on are still unanswered", ErrTimeout, maxUnanswered)

// A call's state, as its goroutine and its caller race to settle it.
const (
	callRunning int32 = iota
	callAnswered
	callAbandoned
)

// admit refuses a call on a connection with maxUnanswered calls waiting:
// it would only wait behind them.
func (c *Conn) admit() error {
	if c.unanswered.Load() < maxUnanswered {
		return nil
	}
	if err := c.dialer.refusal(); err != nil {
		return err
	}
	return fmt.Errorf("%w; none is sent until one of them is answered", ErrUnanswered)
}

// answered is the call's goroutine's, once go-libvirt returns, before it
// hands the answer on: a late handler's own call (see Prepare) finds the
// count without this one. It says whether the answer came in time, before
// its caller gave up.
func (c *Conn) answered(state *atomic.Int32) bool {
	if !state.CompareAndSwap(callRunning, callAnswered) {
		c.unanswered.Add(-1)
		return false
	}
	return true
}

// abandon is the caller's, giving up on a call: false if its answer came
// meanwhile. Counted first, so that its goroutine's late answer never
// finds the count without it.
func (c *Conn) abandon(state *atomic.Int32, op string) bool {
	c.unanswered.Add(1)
	if !state.CompareAndSwap(callRunning, callAbandoned) {
		c.unanswered.Add(-1)
		return false
	}
	if c.cutHung && c.unanswered.Load() >= maxUnanswered {
		c.dialer.cutFor(fmt.Errorf("%w (the last: %s); connection cut", ErrUnanswered, op))
	}
	return true
}

// lastAnswered is when a call last got libvirt's answer in time (a
// monotonic reading, as heard is); zero before any.
func (c *Conn) lastAnswered() time.Time {
	if at := c.answeredAt.Load(); at != 0 {
		return monoEpoch.Add(time.Duration(at))
	}
	return time.Time{}
}
