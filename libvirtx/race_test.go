package libvirtx

import (
	"context"
	"errors"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// A call that times out must not leave anything behind that writes what the
// caller already returned: libvirt answering late is the normal case of a
// slow daemon, and the race detector fails this test if it does.
func TestTimedOutCallAnsweredLateDoesNotRace(t *testing.T) {
	f := libvirtxtest.New(t, "")
	c, err := Dial(context.Background(), f.Path(), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The late answer is timed by the fake, not released by the test: the
	// race detector counts any socket write by the test as ordering it
	// before the reply, which would hide the race this test is about.
	answered := make(chan struct{})
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc != libvirtxtest.ProcConnectGetLibVersion {
			return nil, nil, false
		}
		time.Sleep(200 * time.Millisecond)
		close(answered)
		return be64(42), nil, true
	})
	v, err := c.Ping(context.Background())
	if !errors.Is(err, ErrTimeout) || v != 0 {
		t.Fatalf("Ping = %d, %v; want 0 and ErrTimeout", v, err)
	}
	<-answered
	f.Answer(nil)
	// Let go-libvirt route the late reply to the abandoned call.
	time.Sleep(100 * time.Millisecond)
	if v, err := c.Ping(context.Background()); err != nil || v != 11003000 {
		t.Fatalf("Ping after a late answer = %d, %v", v, err)
	}
}
