package libvirtx

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// listingHandler lists the socket's domains every so often while busy is
// open, as the tracker's sampler does.
type listingHandler struct {
	every time.Duration
	busy  chan struct{}
	lost  chan error
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

func (h listingHandler) Lost(_ string, err error) {
	if h.lost != nil {
		select {
		case h.lost <- err:
		default:
		}
	}
}

// A connection whose calls libvirt answers is not pinged besides: an idle
// launcher's listing shows its daemon's workers serving. Once the calls
// stop, the pings come back.
func TestAConnectionAnsweringItsCallsIsNotPinged(t *testing.T) {
	s := libvirtxtest.New(t, "")
	h := listingHandler{every: 30 * time.Millisecond, busy: make(chan struct{})}
	runPoolWith(t, PoolConfig{Sockets: []string{s.Path()}, CallTimeout: time.Second, PingEvery: 200 * time.Millisecond}, h)
	pings := func() int { return len(s.Calls(libvirtxtest.ProcConnectGetLibVersion)) }
	waitUntil(t, "the listings", 2*time.Second, func() bool { return len(s.Calls(libvirtxtest.ProcConnectGetAllDomainStats)) >= 3 })
	before := pings()
	time.Sleep(time.Second)
	// A loaded machine may hold a listing past the 300 ms that spare a
	// ping, once.
	if n := pings() - before; n > 1 {
		t.Errorf("%d pings in 1 s of answered listings every 30 ms; want none (ping every 200 ms)", n)
	}
	close(h.busy)
	before = pings()
	time.Sleep(time.Second)
	if n := pings() - before; n < 2 {
		t.Errorf("%d pings in 1 s with no other calls; want one every 200 ms", n)
	}
}

// A daemon whose every answer comes past the call's deadline is not
// spared its ping by those late answers: it is found unresponsive.
func TestLateAnswersDoNotSpareThePing(t *testing.T) {
	s := libvirtxtest.New(t, "")
	var slow atomic.Bool
	s.Answer(func(uint32, []byte) ([]byte, *libvirt.Error, bool) {
		if slow.Load() {
			time.Sleep(55 * time.Millisecond)
		}
		return nil, nil, false
	})
	h := listingHandler{every: 60 * time.Millisecond, busy: make(chan struct{}), lost: make(chan error, 1)}
	runPoolWith(t, PoolConfig{Sockets: []string{s.Path()}, CallTimeout: 40 * time.Millisecond, PingEvery: 50 * time.Millisecond}, h)
	waitUntil(t, "the listings", 2*time.Second, func() bool { return len(s.Calls(libvirtxtest.ProcConnectGetAllDomainStats)) >= 2 })
	slow.Store(true)
	select {
	case err := <-h.lost:
		t.Logf("lost: %v", err)
	case <-time.After(2 * time.Second):
		t.Fatal("a daemon answering every call past its deadline was never found unresponsive")
	}
}
