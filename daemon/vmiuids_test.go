package daemon

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// Each KubeVirt domain's UID is read once, a failed read again only after
// a while, and a guest started again under the same name is read anew.
func TestVMIUIDsAreReadOncePerGuest(t *testing.T) {
	doms := []api.Domain{
		{Socket: "/s", Name: "ns_vm", Namespace: "ns", VMI: "vm", UUID: "u1"},
		{Socket: "/s", Name: "plain", UUID: "u2"},
		{Socket: "/t", Name: "ns_other", Namespace: "ns", VMI: "other", UUID: "u3"},
	}
	reads := map[string]int{} // read between rounds, when no read runs
	var mu sync.Mutex         // the reads of a round run side by side
	failing := true
	u := newVMIUIDs(func() []api.Domain { return doms }, func(_ context.Context, socket, domain, uuid string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		reads[domain+"/"+uuid]++
		if domain == "ns_other" && failing {
			return "", errors.New("libvirt said no")
		}
		return "vmi-" + uuid, nil
	})
	now := time.Now()
	ctx := context.Background()
	refresh := func(at time.Time) {
		u.refresh(ctx, at)
		u.held.Wait()
	}
	refresh(now)
	refresh(now.Add(u.pace.every))
	if reads["ns_vm/u1"] != 1 || reads["plain/u2"] != 0 || reads["ns_other/u3"] != 1 {
		t.Fatalf("reads %v: want ns_vm once, plain never, ns_other once until its retry", reads)
	}
	if got := u.get("/s", "ns_vm", "u1"); got != "vmi-u1" {
		t.Errorf("ns_vm's UID %q", got)
	}
	if got := u.get("/t", "ns_other", "u3"); got != "" {
		t.Errorf("a failed read gave %q", got)
	}
	failing = false
	refresh(now.Add(u.pace.retry))
	if got := u.get("/t", "ns_other", "u3"); got != "vmi-u3" || reads["ns_other/u3"] != 2 {
		t.Errorf("after the retry: %q, %d reads", got, reads["ns_other/u3"])
	}
	doms[0].UUID = "u4"
	refresh(now.Add(u.pace.retry + u.pace.every))
	if u.get("/s", "ns_vm", "u1") != "" || u.get("/s", "ns_vm", "u4") != "vmi-u4" {
		t.Errorf("a guest started again under the name keeps the old UID: %v", u.known)
	}
}
