package libvirtx

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// Each call sent is counted once under its operation, as many as the
// daemon received; keepalive packets are none.
func TestCallsCountWhatTheDaemonReceived(t *testing.T) {
	s := libvirtxtest.New(t, "")
	c := dialKeepAlive(t, s, CutOnSilence)
	before, sent := Calls()["ping"], len(s.Calls(libvirtxtest.ProcConnectGetLibVersion))
	for range 5 {
		if _, err := c.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "a keepalive PING on the quiet connection", 2*time.Second, func() bool { return s.KeepAlives(libvirtxtest.KeepAlivePing) >= 1 })
	got, received := Calls()["ping"]-before, len(s.Calls(libvirtxtest.ProcConnectGetLibVersion))-sent
	if got != 5 || received != 5 {
		t.Errorf("five pings and a keepalive: counted %d, the daemon received %d; want 5 and 5", got, received)
	}
}
