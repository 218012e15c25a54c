package proxy

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

func prepared(r *registry, owner string, n int, dry bool) error {
	id := fmt.Sprintf("%s%d%v", owner, n, dry)
	m := Migration{ID: id, Domain: "vm-" + id, State: statePrepared, Expires: time.Now().Add(time.Hour),
		Targets: map[peer.Kind]string{peer.KindMemory: "/x"}, Limits: map[peer.Kind]int{peer.KindMemory: 1}}
	return r.add(m, &peer.IncomingMigration{ID: m.ID, Domain: m.Domain, DryRun: dry}, owner)
}

// One source alone may fill a target's inbound slots; once another is
// turned away, each is held to its share.
func TestInboundSlotsAreSharedOnceContended(t *testing.T) {
	r := newRegistry(2)
	busy := func(err error) bool {
		var re *regError
		return errors.As(err, &re) && re.reason == peer.ReasonInboundBusy
	}
	if err := prepared(r, "a", 1, false); err != nil {
		t.Fatal(err)
	}
	if err := prepared(r, "a", 2, false); err != nil {
		t.Fatalf("a peer alone is refused its second slot: %v", err)
	}
	if err := prepared(r, "b", 1, false); !busy(err) {
		t.Fatalf("a third migration: %v, want %s", err, peer.ReasonInboundBusy)
	}
	// a's first ends: b was turned away, so a is held to one slot.
	for _, e := range r.entries {
		if e.owner == "a" {
			e.ended = "done"
			break
		}
	}
	if err := prepared(r, "a", 3, false); !busy(err) {
		t.Fatalf("a peer over its share while another waits: %v, want %s", err, peer.ReasonInboundBusy)
	}
	if err := prepared(r, "b", 2, false); err != nil {
		t.Fatalf("the peer that waited: %v", err)
	}
	// Dry runs take no slot, and only so many run at once.
	for i := range maxDryRuns {
		if err := prepared(r, "c", i, true); err != nil {
			t.Fatalf("dry run %d: %v", i, err)
		}
	}
	if err := prepared(r, "c", maxDryRuns, true); !busy(err) {
		t.Fatalf("one dry run too many: %v, want %s", err, peer.ReasonInboundBusy)
	}
}
