package drive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/peer"
)

type fakeMemory struct {
	avail    uint64
	resident map[string]uint64
}

func (f *fakeMemory) availableKiB() (uint64, error)       { return f.avail, nil }
func (f *fakeMemory) residentKiB(_, domain string) uint64 { return f.resident[domain] }

func guestOfGiB(name string, gib int) string {
	return fmt.Sprintf("<domain type='kvm'><name>%s</name><memory unit='GiB'>%d</memory></domain>", name, gib)
}

// Guests that each fit the node's total were all taken: two 6 GiB guests
// coming into 10 GiB available would have the kernel kill one. What the
// guests already coming have yet to fill is counted against what is
// available, and given back when their migration ends.
func TestIncomingGuestsAreAdmittedAgainstWhatIsAvailableAndTheirSum(t *testing.T) {
	mem := &fakeMemory{avail: 10 << 20, resident: map[string]uint64{}}
	in := &Target{memory: mem}
	if err := in.admit("m1", "a", guestOfGiB("a", 6)); err != nil {
		t.Fatalf("the first guest: %v", err)
	}
	mem.resident["a"], mem.avail = 1<<20, 9<<20
	err := in.admit("m2", "b", guestOfGiB("b", 6))
	var r *peer.Refusal
	if !errors.As(err, &r) || r.Reason != ReasonNoMemory || !strings.Contains(r.Msg, "already coming here need 5.0 GiB more") {
		t.Fatalf("a second 6 GiB guest while the first has 5 GiB to fill of 9 available: %v", err)
	}
	if err := in.admit("m2", "b", guestOfGiB("b", 4)); err != nil {
		t.Fatalf("a second 4 GiB guest while the first has 5 GiB to fill of 9 available: %v", err)
	}
	if err := in.admit("m3", "c", guestOfGiB("c", 1)); err == nil {
		t.Fatal("a third guest admitted past the sum")
	}
	in.release("m1")
	in.release("m2")
	if err := in.admit("m3", "c", guestOfGiB("c", 1)); err != nil {
		t.Fatalf("a guest once the others ended: %v", err)
	}
}

// libvirt sizes a guest with no <memory> by its NUMA cells: so is it
// admitted. A ballooned one is admitted for all of its memory: a peer
// stated <currentMemory> 1 MiB beside 9 GiB, and eight such guests were
// admitted into 10 GiB available, each free to fill its 9.
func TestAGuestIsAdmittedByTheSizeLibvirtGivesIt(t *testing.T) {
	for name, c := range map[string]struct {
		xml string
		kib uint64
	}{
		"NUMA cells only":   {"<domain><name>n</name><cpu><numa><cell id='0' cpus='0' memory='30' unit='GiB'/><cell id='1' cpus='1' memory='30' unit='GiB'/></numa></cpu></domain>", 60 << 20},
		"cells past memory": {"<domain><name>n</name><memory unit='GiB'>1</memory><cpu><numa><cell id='0' cpus='0' memory='8' unit='GiB'/></numa></cpu></domain>", 8 << 20},
		"ballooned":         {"<domain><name>b</name><memory unit='GiB'>16</memory><currentMemory unit='GiB'>4</currentMemory></domain>", 16 << 20},
	} {
		got, err := guestKiB(c.xml)
		if err != nil || got != c.kib {
			t.Errorf("%s: %d KiB (%v), want %d", name, got, err, c.kib)
		}
	}
}

// A guest still paused for its incoming migration, or in post-copy, is
// coming; one that runs whole, or any other, has arrived or gone.
func TestOnlyAGuestInItsMigrationIsStillComing(t *testing.T) {
	for _, c := range []struct {
		state, reason string
		coming        bool
	}{{"paused", "migration", true}, {"running", "post-copy", true}, {"running", "post-copy-failed", true}, {"running", "migrated", false}, {"paused", "user", false}, {"shutoff", "destroyed", false}} {
		if got := stillComing(api.Domain{State: c.state, Reason: c.reason}); got != c.coming {
			t.Errorf("%s/%s: coming %v, want %v", c.state, c.reason, got, c.coming)
		}
	}
}

// A guest counts as coming here until its Prepare has returned and the
// tracker has had the time to see it, however slow the Prepare: one whose
// Prepare ran past a minute was dropped from the sum while its QEMU filled.
func TestAGuestCountsAsComingUntilItsPrepareIsSeen(t *testing.T) {
	mem := &fakeMemory{avail: 10 << 20, resident: map[string]uint64{}}
	tr, rec := newRecord(migration.Config{})
	in := &Target{memory: mem, tracker: tr, books: rec.Books}
	if err := in.admit("slow", "slow", guestOfGiB("slow", 6)); err != nil {
		t.Fatal(err)
	}
	in.mu.Lock()
	in.forgetArrivedLocked()
	_, kept := in.admitted["slow"]
	in.mu.Unlock()
	if !kept {
		t.Fatal("a guest whose Prepare has not returned was forgotten")
	}
	in.prepared("slow", 0)
	in.mu.Lock()
	g := in.admitted["slow"]
	g.prepared = g.prepared.Add(-2 * trackerLag)
	in.admitted["slow"] = g
	in.forgetArrivedLocked()
	_, kept = in.admitted["slow"]
	in.mu.Unlock()
	if kept {
		t.Error("a guest prepared long ago that libvirt does not hold as coming is still counted")
	}
}

// A guest admitted here is known by the files of the XML it was checked
// with, live and definition, as that very domain (its name, its UUID and
// the domain its Prepare started), for as long as it is coming; two
// prepares of one guest are libvirt's to tell apart; a guest libvirt
// does not list yet counts among the others all the same.
func TestAnAdmittedGuestIsKnownByItsFilesAsThatDomainOnly(t *testing.T) {
	in := &Target{memory: &fakeMemory{avail: 10 << 20, resident: map[string]uint64{}}}
	u := libvirt.UUID{7}
	uuid := libvirtx.UUIDString(u)
	live := "<domain type='kvm'><name>a</name><uuid>" + uuid + "</uuid><memory unit='GiB'>1</memory><devices>" +
		"<disk type='file' device='disk'><source file='/var/lib/libvirt/images/a.qcow2'/><target dev='vda'/></disk></devices></domain>"
	config := strings.Replace(live, "</devices>", "<disk type='file' device='disk'><source file='/var/lib/libvirt/images/a-data.raw'/><target dev='vdb'/></disk></devices>", 1)
	if err := in.admit("m1", "a", live); err != nil {
		t.Fatal(err)
	}
	files, err := guestFilesOf(live, config)
	if err != nil {
		t.Fatal(err)
	}
	in.noteComingFiles("m1", uuid, files)
	others := map[string]libvirtx.GuestFiles{}
	in.unlistedComing(others, "another")
	if len(others) != 1 {
		t.Errorf("a guest admitted but not yet listed by libvirt is not among the others: %v", others)
	}
	g, ok := in.comingFiles(libvirt.Domain{Name: "a", UUID: u, ID: 3})
	f := g.Files
	if !ok || !slices.Contains(f.Own, "/var/lib/libvirt/images/a.qcow2") || !slices.Contains(f.Own, "/var/lib/libvirt/images/a-data.raw") {
		t.Fatalf("the coming guest's files: %+v %v, want its live disk and its definition's", f, ok)
	}
	if _, ok := in.comingFiles(libvirt.Domain{Name: "b", UUID: u, ID: 3}); ok {
		t.Error("another name of the UUID is known by the coming guest's files")
	}
	in.prepared("m1", 3)
	if _, ok := in.comingFiles(libvirt.Domain{Name: "a", UUID: u, ID: 4}); ok {
		t.Error("a domain other than the one its Prepare started is known by the coming guest's files")
	}
	if err := in.admit("m2", "a", live); err != nil {
		t.Fatal(err)
	}
	in.noteComingFiles("m2", uuid, files)
	if _, ok := in.comingFiles(libvirt.Domain{Name: "a", UUID: u, ID: 3}); ok {
		t.Error("a guest two prepares name is known by one's files")
	}
	in.release("m1")
	in.release("m2")
	if _, ok := in.comingFiles(libvirt.Domain{Name: "a", UUID: u, ID: 3}); ok {
		t.Error("a guest whose migration ended is still known as coming")
	}
}

// Prepares are checked one at a time; one whose peer gives up while
// another is being checked leaves at once, holding nothing.
func TestAPrepareWaitingForTheCheckLeavesWhenItsPeerGivesUp(t *testing.T) {
	in := &Target{}
	in.checkOne() <- struct{}{} // another prepare's check
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := in.checkAndAdmit(ctx, nil, peer.IncomingMigration{ID: "m1", Domain: "a"}, guestOfGiB("a", 1), "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a prepare waiting for the check: %v, want its peer's deadline", err)
	}
	if len(in.admitted) != 0 {
		t.Error("a prepare that left was admitted")
	}
}

// A guest whose Finish runs here stays admitted and known by its checked
// files, running though it is (the Finish started its vCPUs, and libvirt
// holds back its XML until the Finish returns): it was forgotten by the
// next prepare's admission, whose check then waited on libvirt for it and
// was refused. Not past finishHeld, and not once released.
func TestAGuestWhoseFinishRunsHereIsStillKnownByItsFiles(t *testing.T) {
	mem := &fakeMemory{avail: 10 << 20, resident: map[string]uint64{}}
	tr, rec := newRecord(migration.Config{})
	in := &Target{memory: mem, tracker: tr, books: rec.Books}
	u := libvirt.UUID{4}
	if err := in.admit("m1", "a", guestOfGiB("a", 1)); err != nil {
		t.Fatal(err)
	}
	in.noteComingFiles("m1", libvirtx.UUIDString(u), libvirtx.GuestFiles{Own: []string{"/var/lib/libvirt/images/a.qcow2"}})
	in.prepared("m1", 3)
	age := func(id string) {
		in.mu.Lock()
		g := in.admitted[id]
		g.prepared = g.prepared.Add(-2 * trackerLag)
		in.admitted[id] = g
		in.mu.Unlock()
	}
	age("m1")
	in.finishing("m1")
	in.mu.Lock()
	in.forgetArrivedLocked()
	in.mu.Unlock()
	g, ok := in.comingFiles(libvirt.Domain{Name: "a", UUID: u, ID: 3})
	if !ok || !g.Finishing || len(g.Files.Own) != 1 {
		t.Fatalf("a guest whose Finish runs here: %+v, %v; want it known, finishing", g, ok)
	}
	in.mu.Lock()
	held := in.admitted["m1"]
	held.finishing = held.finishing.Add(-2 * finishHeld)
	in.admitted["m1"] = held
	in.mu.Unlock()
	if g, _ := in.comingFiles(libvirt.Domain{Name: "a", UUID: u, ID: 3}); g.Finishing {
		t.Error("a Finish begun past finishHeld ago still holds the guest")
	}
	in.mu.Lock()
	in.forgetArrivedLocked()
	_, kept := in.admitted["m1"]
	in.mu.Unlock()
	if kept {
		t.Error("a guest whose Finish began past finishHeld ago, and libvirt does not hold as coming, is still admitted")
	}
}
