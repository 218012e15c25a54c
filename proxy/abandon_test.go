package proxy

import (
	"slices"
	"testing"
)

// A domain that migrates back here soon after its last incoming job ended
// must keep its new migration when the old job's grace runs out; an old
// migration nobody finished is dropped.
func TestAbandonDropsOnlyTheMigrationsListedAtTheJobsEnd(t *testing.T) {
	n := startNode(t, nil)
	register := func(id, domain string) {
		t.Helper()
		if _, err := n.p.Register(id, domain, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	register("old", "vm")
	register("other", "vm2")
	ended := incomingOf(n.p, "vm")
	if !slices.Equal(ended, []string{"old"}) {
		t.Fatalf("incoming migrations of vm: %v, want [old]", ended)
	}
	// The source finished it, and the domain comes back in a new one.
	n.p.Unregister("old", "finished")
	register("new", "vm")
	if got := n.p.Abandon(ended, "job ended"); len(got) != 0 {
		t.Fatalf("dropped %v after the old job's end, want nothing", got)
	}
	if got := incomingOf(n.p, "vm"); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("left %v of vm, want the later migration [new]", got)
	}
	// One nobody finished is dropped when its grace runs out.
	stale := incomingOf(n.p, "vm2")
	if got := n.p.Abandon(stale, "job ended"); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("dropped %v, want [other]", got)
	}
	if got := incomingOf(n.p, "vm2"); len(got) != 0 {
		t.Fatalf("vm2 still has %v", got)
	}
}

func incomingOf(p *Proxy, domain string) []string {
	var ids []string
	for _, m := range p.Registered() {
		if m.Domain == domain {
			ids = append(ids, m.ID)
		}
	}
	return ids
}
