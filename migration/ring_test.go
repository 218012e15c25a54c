package migration

import (
	"slices"
	"strings"
	"testing"
)

func TestRingKeepsNewest(t *testing.T) {
	r := newRing[int](3)
	if r.last() != nil {
		t.Fatal("empty ring has a last value")
	}
	for i := 1; i <= 5; i++ {
		r.push(i)
	}
	if got := r.slice(); !slices.Equal(got, []int{3, 4, 5}) {
		t.Fatalf("slice %v, want [3 4 5]", got)
	}
	if *r.last() != 5 || r.len() != 3 {
		t.Fatalf("last %d len %d", *r.last(), r.len())
	}
}

func TestVMIName(t *testing.T) {
	for _, c := range []struct{ in, ns, name string }{
		{"default_vm1", "default", "vm1"},
		{"plain-domain", "", ""},
		{"a_b_c", "", ""},
		{"_x", "", ""},
		{"default_vm.example", "default", "vm.example"},
		// Names from a hostile socket: none may become a path or a key.
		{"/../../../../../etc/cni/net.d/00-x_vm", "", ""},
		{"default_../../x", "", ""},
		{"default_a/b", "", ""},
		{"Default_vm", "", ""},
		{"default_vm..x", "", ""},
		{"default_" + strings.Repeat("v", 254), "", ""},
	} {
		ns, n, _ := vmiName(c.in)
		if ns != c.ns || n != c.name {
			t.Errorf("vmiName(%q) = %q,%q want %q,%q", c.in, ns, n, c.ns, c.name)
		}
	}
}

func TestRingNeverHoldsRoomPastItsLimit(t *testing.T) {
	r := newRing[int](300)
	if cap(r.buf) != 0 {
		t.Fatalf("an empty ring holds room for %d", cap(r.buf))
	}
	for i := range 1000 {
		r.push(i)
		if cap(r.buf) > 300 {
			t.Fatalf("room for %d after %d values, limit 300", cap(r.buf), i+1)
		}
	}
	if r.len() != 300 || *r.last() != 999 {
		t.Fatalf("len %d, last %d", r.len(), *r.last())
	}
}
