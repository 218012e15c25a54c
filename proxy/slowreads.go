package proxy

import (
	"net"
	"time"

	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/peer"
)

// slowReturnPathDelay is how long the SlowReturnPath fault holds each
// read from the target QEMU.
const slowReturnPathDelay = 3 * time.Second

// slowReads holds each read from its connection (see faults.SlowReturnPath).
type slowReads struct{ *net.UnixConn }

func (s slowReads) Read(p []byte) (int, error) {
	n, err := s.UnixConn.Read(p)
	if n > 0 {
		time.Sleep(slowReturnPathDelay)
	}
	return n, err
}

// withFaults wraps a target QEMU's memory stream as the faults a ferryd
// built for the end-to-end tests are told to inject; any other build
// returns it as it is.
func withFaults(local net.Conn, kind peer.Kind) net.Conn {
	if u, ok := local.(*net.UnixConn); ok && kind == peer.KindMemory && faults.Inject(faults.SlowReturnPath) {
		return slowReads{u}
	}
	return local
}
