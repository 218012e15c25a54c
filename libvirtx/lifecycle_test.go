package libvirtx

import (
	"context"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// One domain's subscription delivers its events alone: go-libvirt
// registers for every domain's, whatever domain it is given, and each
// migration's guard would wake for every guest of the node.
func TestLifecycleDeliversOneDomainsEventsOnly(t *testing.T) {
	s := libvirtxtest.New(t, "")
	s.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: libvirt.UUID{1}, ID: 1, State: int32(StateRunning)},
		libvirtxtest.Domain{Name: "other", UUID: libvirt.UUID{2}, ID: 2, State: int32(StateRunning)})
	c, err := Dial(context.Background(), s.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dom, err := c.LookupDomain(context.Background(), "vm")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := c.Lifecycle(ctx, dom, 16)
	if err != nil {
		t.Fatal(err)
	}
	s.Lifecycle("other", int32(libvirt.DomainEventSuspended), 0)
	s.Lifecycle("vm", int32(libvirt.DomainEventResumed), 0)
	select {
	case ev := <-events:
		if ev.Domain.UUID != dom.UUID || ev.Event != int32(libvirt.DomainEventResumed) {
			t.Fatalf("delivered %+v, want vm's resumed event alone", ev)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("vm's event was not delivered")
	}
	select {
	case ev := <-events:
		t.Fatalf("a further event was delivered: %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}
