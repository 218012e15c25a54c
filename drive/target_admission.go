package drive

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/units"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// An incoming guest is admitted against the memory this node has
// available now, less what the guests already coming here have yet to
// fill (their size, less what their QEMU holds so far): libvirt's Prepare
// starts a QEMU whatever is free, and guests that each fit the node's
// total would together have the kernel kill one of them, or a neighbour.

// incomingGuest is a guest admitted and still coming here.
type incomingGuest struct {
	domain string
	kib    uint64
	// prepared is when its Prepare returned; zero before, when it counts
	// as coming whatever the tracker says (a slow Prepare has shown
	// libvirt nothing yet).
	prepared time.Time
	// uuid and files are its checked XML's, domID the domain its Prepare
	// started (see target_coming.go).
	uuid  string
	files libvirtx.GuestFiles
	domID int32
	// finishing is when libvirt's Finish of it began here, zero before:
	// that Finish starts its vCPUs before it returns (see
	// libvirtx.ComingGuest).
	finishing time.Time
}

// finishHeld bounds how long a guest whose Finish began counts as held by
// it, running: a pre-copy's Finish returns moments after the vCPUs start
// (a post-copy's guest counts as coming by its state until it ends).
const finishHeld = time.Minute

// heldByFinish says whether g's Finish runs here, as far as it may.
func (g incomingGuest) heldByFinish() bool {
	return !g.finishing.IsZero() && time.Since(g.finishing) < finishHeld
}

// trackerLag is how long after its Prepare a guest counts as coming
// before the tracker's view of libvirt is asked whether it still is.
const trackerLag = 10 * time.Second

// memorySource tells how much memory the node has available, and how much
// a guest's QEMU holds; the node's own /proc unless a test says otherwise.
type memorySource interface {
	availableKiB() (uint64, error)
	residentKiB(socket, domain string) uint64
}

type procMemory struct{}

func (procMemory) availableKiB() (uint64, error) {
	return meminfoKiB("MemAvailable")
}

// residentKiB is what the domain's QEMU holds; 0 when it cannot be told,
// which counts the guest whole, never less.
func (procMemory) residentKiB(socket, domain string) uint64 {
	pid, err := libvirtx.QEMUPID(socket, domain)
	if err != nil {
		return 0
	}
	kib, _ := statusKiB(fmt.Sprintf("/proc/%d/status", pid), "VmRSS")
	return kib
}

// admit reserves memory for migration id's guest, or refuses it naming
// what it needs and what there is; unadmit gives the reservation back.
func (in *Target) admit(id, domain, domXML string) error {
	kib, err := guestKiB(domXML)
	if err != nil {
		return &peer.Refusal{Reason: "invalid_domain_xml", Msg: err.Error()}
	}
	mem := in.memory
	if mem == nil {
		mem = procMemory{}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.forgetArrivedLocked()
	avail, err := mem.availableKiB()
	if err != nil {
		return fmt.Errorf("reading this node's available memory: %w", err)
	}
	var owed uint64
	for _, g := range in.admitted {
		if held := mem.residentKiB(in.socket, g.domain); held < g.kib {
			owed += g.kib - held
		}
	}
	if owed+kib > avail {
		return &peer.Refusal{Reason: ReasonNoMemory, Msg: fmt.Sprintf("the guest needs %s; the %d guest(s) already coming here need %s more; this node has %s available",
			units.IEC(kib<<10), len(in.admitted), units.IEC(owed<<10), units.IEC(avail<<10))}
	}
	if in.admitted == nil {
		in.admitted = map[string]incomingGuest{}
	}
	in.admitted[id] = incomingGuest{domain: domain, kib: kib}
	return nil
}

// prepared notes that migration id's Prepare returned, starting domain
// domID (0 if unread): from a moment later, the tracker can tell whether
// its guest is still coming.
func (in *Target) prepared(id string, domID int32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if g, ok := in.admitted[id]; ok {
		g.prepared, g.domID = time.Now(), domID
		in.admitted[id] = g
	}
}

// forgetArrivedLocked drops the guests that are no longer coming, as the
// tracker last saw libvirt: arrived, stopped, or gone. Every end of a
// migration gives its guest back (release), but one cut short (a finish
// cut by a recovery, a held guest's cancel) may not say so.
func (in *Target) forgetArrivedLocked() {
	if in.tracker == nil || len(in.admitted) == 0 {
		return
	}
	doms := map[string]api.Domain{}
	for _, d := range in.tracker.Domains() {
		if d.Socket == in.socket {
			doms[d.Name] = d
		}
	}
	for id, g := range in.admitted {
		if g.prepared.IsZero() || time.Since(g.prepared) < trackerLag {
			continue
		}
		if d, ok := doms[g.domain]; !g.heldByFinish() && (!ok || !stillComing(d)) {
			delete(in.admitted, id)
		}
	}
}

// stillComing: libvirt holds an incoming guest paused for its migration,
// and one in post-copy running on pages still to come.
func stillComing(d api.Domain) bool {
	return d.State == "paused" && d.Reason == "migration" || strings.HasPrefix(d.Reason, "post-copy")
}

// finishing notes that libvirt's Finish of migration id begins here.
func (in *Target) finishing(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if g, ok := in.admitted[id]; ok {
		g.finishing = time.Now()
		in.admitted[id] = g
	}
}

// finished notes that this node no longer waits on migration id's Finish.
func (in *Target) finished(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if g, ok := in.admitted[id]; ok {
		g.finishing = time.Time{}
		in.admitted[id] = g
	}
}

func (in *Target) unadmit(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.admitted, id)
}

// ReasonNoMemory refuses a guest this node has no memory for now.
const ReasonNoMemory = peer.ReasonNoMemory

// guestKiB is the memory the guest comes with, sized as libvirt sizes it
// (the sum of its NUMA cells where they say more). Not its current memory:
// a balloon is the guest's to honour, the source sends every page it
// likes, and a guest may deflate its balloon the moment it runs here.
func guestKiB(domXML string) (uint64, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domXML); err != nil {
		return 0, err
	}
	return libvirtx.GuestMemoryKiB(&d)
}

func meminfoKiB(field string) (uint64, error) { return statusKiB("/proc/meminfo", field) }

// statusKiB reads "field: N kB" out of a /proc file.
func statusKiB(path, field string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			break
		}
		return strconv.ParseUint(fs[0], 10, 64)
	}
	return 0, fmt.Errorf("%s: no %s", path, field)
}
