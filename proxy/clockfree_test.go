package proxy

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/peer"
)

// A clock stepped a month forward (a bad RTC corrected) leaves every
// record a source may still ask about: only their number bounds them.
func TestOutcomesOutliveAClockStep(t *testing.T) {
	dir := t.TempDir()
	s, err := openOutcomes(dir)
	if err != nil {
		t.Fatal(err)
	}
	old := outcomeRecord{ID: "aaaaaaaaaaaaaaaa", Owner: "node-a", Domain: "vm", Prepared: time.Now()}
	if err := s.save(old); err != nil {
		t.Fatal(err)
	}
	month := time.Now().Add(-30 * 24 * time.Hour)
	p, _ := s.path(old.ID)
	if err := os.Chtimes(p, month, month); err != nil {
		t.Fatal(err)
	}
	if err := s.save(outcomeRecord{ID: "bbbbbbbbbbbbbbbb", Owner: "node-a", Domain: "other", Prepared: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.load(old.ID); !ok || err != nil {
		t.Fatalf("a month-old record was dropped (ok=%v, err=%v): its source could never hear its answer", ok, err)
	}
}

// A split held for hours is re-armed after a restart of the target's
// ferryd, and of a domain migrated here twice only its latest migration
// counts.
func TestHeldIncomingListsOldSplitsAndOnlyEachDomainsLatest(t *testing.T) {
	dir := t.TempDir()
	n := startNodeWith(t, Config{OutcomeDir: dir})
	split := &peer.ControlResponse{Outcome: peer.OutcomeSplit}
	recs := []outcomeRecord{
		{ID: "0000000000000001", Owner: "a", Domain: "old", Prepared: time.Now().Add(-48 * time.Hour), Result: split},
		{ID: "0000000000000002", Owner: "a", Domain: "twice", Prepared: time.Now().Add(-2 * time.Hour), Result: split},
		{ID: "0000000000000003", Owner: "a", Domain: "twice", Prepared: time.Now().Add(-time.Hour), Result: &peer.ControlResponse{Outcome: peer.OutcomeRunning}},
	}
	for _, r := range recs {
		if err := n.p.outcomes.save(r); err != nil {
			t.Fatal(err)
		}
		p, _ := n.p.outcomes.path(r.ID)
		os.Chtimes(p, r.Prepared, r.Prepared)
	}
	held := n.p.HeldIncoming()
	if len(held) != 1 || held[0].ID != recs[0].ID {
		t.Fatalf("held incoming %+v; want only the two-day-old split of %q", held, "old")
	}
}

// A monitor stays while its QEMU listens on it, however old, and goes once
// none does.
func TestMonitorsGoWhenNoQEMUListens(t *testing.T) {
	dir := t.TempDir()
	if err := makeMonitorDir(dir); err != nil {
		t.Fatal(err)
	}
	bind := func(name string) net.Listener {
		ln, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		// Hidden as the proxy hides it: the kernel keeps the bound name.
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(dir, monitorDirName, name)); err != nil {
			t.Fatal(err)
		}
		return ln
	}
	live := bind("live-qmp.sock")
	defer live.Close()
	bind("dead-qmp.sock").Close()
	year := time.Now().Add(-365 * 24 * time.Hour)
	os.Chtimes(filepath.Join(dir, monitorDirName, "live-qmp.sock"), year, year)

	removeStaleMonitors(dir, 0, zap.NewNop())
	if _, err := os.Lstat(filepath.Join(dir, monitorDirName, "live-qmp.sock")); err != nil {
		t.Errorf("the monitor a QEMU listens on was removed: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, monitorDirName, "dead-qmp.sock")); !os.IsNotExist(err) {
		t.Errorf("a monitor nobody listens on was kept (%v)", err)
	}
}

// A monitor a QEMU makes in the socket dir (one restored from a live XML
// that names it) is out of other QEMUs' reach at once, not at the next
// sweep, and still answers at its hidden place.
func TestAMonitorMadeInTheSocketDirIsHiddenAtOnce(t *testing.T) {
	n := startNode(t, nil)
	dir := n.p.cfg.SocketDir
	name := "m-1-qmp.sock"
	ln, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	deadline := time.Now().Add(5 * time.Second)
	defer ln.Close()
	hidden := filepath.Join(dir, monitorDirName, name)
	for {
		if _, err := os.Lstat(hidden); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a monitor made in the socket dir was not moved out of QEMU's reach within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
		t.Errorf("the monitor is still in the socket dir: %v", err)
	}
	c, err := net.Dial("unix", hidden)
	if err != nil {
		t.Fatalf("the hidden monitor does not answer: %v", err)
	}
	c.Close()
}
