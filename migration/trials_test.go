package migration

import (
	"testing"

	"github.com/ferry-vm/ferry/libvirtx"
)

// heldDomains are the domains a migration that moves nothing holds.
type heldDomains map[string]bool

func (h heldDomains) Holds(socket, domain string) bool { return h[socket+"/"+domain] }

// A dry run's libvirt job, on either side, is no migration: no job is
// opened for a held domain, and one is once the hold is gone.
func TestNoJobIsOpenedForAHeldDomain(t *testing.T) {
	held := heldDomains{sock + "/" + dom.Name: true}
	f := newFeed(t, "a")
	f.tr = NewTracker(Config{Node: "a", Trials: held})
	f.stats(outgoing(1, 300))
	f.lifecycle(libvirtx.EventStarted, libvirtx.StartedMigrated)
	if jobs := f.tr.Jobs(true); len(jobs) != 0 {
		t.Fatalf("jobs %+v opened for a held domain", jobs)
	}
	delete(held, sock+"/"+dom.Name)
	f.stats(outgoing(1, 400))
	if _, ok := f.tr.Job(dom.Name); !ok {
		t.Fatal("no job once the hold was gone")
	}
}
