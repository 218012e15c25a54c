package proxy

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// Before, HeldIncoming kept each domain's "latest" record by the wall clock the
// record was written at. A node whose clock ran ahead (the bad RTC the
// change guards against, stepped the other way) wrote an old split of
// domain vm "in the future"; after the clock is corrected, a new split of
// vm is older by its stamp, and the stale record is the one re-armed
// (forgetUnheld then drops it by its instance), the live split not at all.
func TestHeldIncomingPicksTheSplitWhoseQEMUListensWhateverTheClock(t *testing.T) {
	dir := t.TempDir()
	n := startNodeWith(t, Config{OutcomeDir: dir})
	split := &peer.ControlResponse{Outcome: peer.OutcomeSplit}
	stale := outcomeRecord{ID: "stale00000000001", Owner: "a", Domain: "vm", Instance: "1/old", Prepared: time.Now().Add(30 * 24 * time.Hour), Result: split}
	live := outcomeRecord{ID: "live000000000002", Owner: "a", Domain: "vm", Instance: "2/new", Prepared: time.Now(), Result: split}
	for _, r := range []outcomeRecord{stale, live} {
		b := r
		if err := n.p.outcomes.save(b); err != nil {
			t.Fatal(err)
		}
	}
	// saveRecord stamps Prepared with time.Now(); write the stale one's
	// stamp as the clock that ran ahead had it.
	p, _ := n.p.outcomes.path(stale.ID)
	os.Remove(p)
	if err := n.p.outcomes.save(stale); err != nil {
		t.Fatal(err)
	}
	// The live split's QEMU listens on its monitor, moved out of reach.
	mon := TargetMonitorPath(n.p.cfg.SocketDir, live.ID)
	ln, err := net.Listen("unix", mon)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := n.p.HeldIncoming()
	if len(held) != 1 || held[0].ID != live.ID {
		t.Fatalf("held incoming %+v; want the live split %s", held, live.ID)
	}
}
