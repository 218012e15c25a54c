package evacuate

import (
	"context"
	"strings"
	"testing"
)

// A size libvirt answers with its own error is unknown, not late: the
// check asks every disk's and names none as unanswered (a plan would not
// take the domain as measured).
func TestASizeLibvirtRefusesIsUnknownNotLate(t *testing.T) {
	noSize := func(context.Context) (uint64, bool, error) { return 0, false, nil }
	dom := &fakeDomain{socket: "/run/libvirt/virtqemud-sock", name: "vm1", disks: 3, size: noSize}
	c := NewChecker(CheckConfig{Node: "n1", Libvirt: &fakeLibvirt{doms: map[string]*fakeDomain{dom.socket: dom}}})
	resp, unsized, err := c.inspect(context.Background(), dom.socket, dom.name, false)
	if err != nil {
		t.Fatal(err)
	}
	if unsized != "" || dom.sizeCalls() != 3 {
		t.Errorf("unsized %q after %d size calls, want none after 3", unsized, dom.sizeCalls())
	}
	if resp.Node != "n1" || resp.Domain != "vm1" || len(resp.Blockers) != 3 {
		t.Fatalf("check: %+v", resp)
	}
	for _, b := range resp.Blockers {
		if b.SizeBytes != 0 || strings.Contains(b.Message, "its size is") {
			t.Errorf("disk %s: size %d, %q", b.Device, b.SizeBytes, b.Message)
		}
	}
}
