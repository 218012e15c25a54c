package libvirtx

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// listingHandler lists the socket's domains every so often while busy is
// open, as the tracker's sampler does.
type listingHandler struct {
	every time.Duration
	busy  chan struct{}
}

func (h listingHandler) Serve(ctx context.Context, c *Conn, _ <-chan Event) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.busy:
			<-ctx.Done()
			return
		case <-t.C:
			c.Domains(ctx)
		}
	}
}

func (listingHandler) Lost(string, error) {}

// A connection whose calls libvirt answers is not pinged besides: an idle
// launcher's listing shows its daemon's workers serving. Once the calls
// stop, the pings come back.
func TestAConnectionAnsweringItsCallsIsNotPinged(t *testing.T) {
	s := libvirtxtest.New(t, "")
	h := listingHandler{every: 30 * time.Millisecond, busy: make(chan struct{})}
	runPoolWith(t, PoolConfig{Sockets: []string{s.Path()}, CallTimeout: time.Second, PingEvery: 50 * time.Millisecond}, h)
	pings := func() int { return len(s.Calls(libvirtxtest.ProcConnectGetLibVersion)) }
	waitUntil(t, "the listings", 2*time.Second, func() bool { return len(s.Calls(libvirtxtest.ProcConnectGetAllDomainStats)) >= 3 })
	before := pings()
	time.Sleep(500 * time.Millisecond)
	if n := pings() - before; n > 1 {
		t.Errorf("%d pings in 500 ms of answered listings every 30 ms; want none (ping every 50 ms)", n)
	}
	close(h.busy)
	before = pings()
	time.Sleep(500 * time.Millisecond)
	if n := pings() - before; n < 3 {
		t.Errorf("%d pings in 500 ms with no other calls; want one every 50 ms", n)
	}
}
