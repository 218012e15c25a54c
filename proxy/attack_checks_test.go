package proxy

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// slowChecker is an Incoming whose XML check takes a while, counting the
// checks of one peer's prepares under way at once.
type slowChecker struct {
	*fakeIncoming
	now, peak atomic.Int32
}

var _ peer.Incoming = (*slowChecker)(nil)

func (s *slowChecker) Check(peer.IncomingMigration, string) (*peer.CheckedXML, error) {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	time.Sleep(200 * time.Millisecond)
	return nil, &peer.Refusal{Reason: "invalid_domain_xml", Msg: "checked and refused"}
}

// A peer's prepares each cost a check of their XML (at worst hundreds of
// MiB, before the attribute cap); the peer's control slot was given back
// once a request was read, so one peer ran 39 checks at once. Its
// requests waiting for or in their check stay within its share of
// control connections, and one of them is checked at a time.
func TestAttackOnePeersChecksStayWithinItsShare(t *testing.T) {
	dst := startNode(t, nil)
	ck := &slowChecker{fakeIncoming: dst.in}
	dst.p.cfg.Incoming = ck
	who := net.IPv4(127, 0, 1, 1)
	var wg sync.WaitGroup
	for i := range 4 * MaxControlConnsPerPeer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			controlRequestFrom(t, dst.addr, who, fmt.Sprintf(`{"op":"prepare","migration":"m%d","domain":"vm%d","xml":"<domain/>"}`, i, i))
		}()
	}
	wg.Wait()
	if got := ck.peak.Load(); got == 0 || got > MaxCheckingPerPeer {
		t.Fatalf("one peer had %d XML checks under way at once, more than its %d", got, MaxCheckingPerPeer)
	}
	t.Logf("at most %d of the peer's checks at once", ck.peak.Load())
}
