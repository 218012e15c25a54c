package libvirtx

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-vm/ferry/internal/testenv"
)

// takenFrom is TakenFrom of an incoming domain whose own disk is in,
// against a domain "victim" whose own disk is victim.
func takenFrom(in, victim string) bool {
	_, taken := TakenFrom(GuestFiles{Own: []string{in}}, map[string]GuestFiles{"victim": {Own: []string{victim}}})
	return taken
}

// Another domain's disk named another way was not seen as taken: the
// check compared spellings. A hard link, a directory reached through a
// link, and the file itself are one file.
func TestAttackAnotherNameOfAGuestsFileIsTaken(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "images", "victim.img")
	if err := os.MkdirAll(filepath.Dir(disk), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	linkedDir := filepath.Join(dir, "linked")
	if err := os.Symlink(filepath.Join(dir, "images"), linkedDir); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.img")
	if err := os.Link(disk, hard); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{"through a linked directory": filepath.Join(linkedDir, "victim.img"), "a hard link": hard} {
		if !takenFrom(p, disk) {
			t.Errorf("%s (%s) to the victim's disk was not taken from it", name, p)
		}
	}
	other := filepath.Join(dir, "images", "other.img")
	os.WriteFile(other, nil, 0o600)
	if takenFrom(other, disk) {
		t.Error("a file of its own was taken from the victim")
	}
	// The block device the victim's image lies on holds the image.
	var st unix.Stat_t
	if unix.Stat(disk, &st) == nil && unix.Major(st.Dev) != 0 {
		if k := keysOf(disk); !slices.Contains(k.under, fmt.Sprintf("block %d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))) {
			t.Errorf("the victim's image %s does not lie on its filesystem's device: %+v", disk, k)
		}
	}
}

// A fake sysfs of one disk sdb (8:16) with partitions sdb1 (8:17) and
// sdb2 (8:18), and two logical volumes dm-3 (253:3) and dm-4 (253:4)
// on sdb2; and a node for each in dev.
func fakeBlockDevices(t *testing.T) (dev string) {
	testenv.Root(t, "make block device nodes")
	root := t.TempDir()
	sys, dev := filepath.Join(root, "sys"), filepath.Join(root, "dev")
	sysBlock = filepath.Join(root, "dev-block")
	t.Cleanup(func() { sysBlock = "/sys/dev/block" })
	for _, d := range []string{sys, dev, sysBlock} {
		os.MkdirAll(d, 0o755)
	}
	device := func(name, rel, number string, major, minor uint32, partition bool, slaves ...string) {
		dir := filepath.Join(sys, rel)
		os.MkdirAll(filepath.Join(dir, "slaves"), 0o755)
		os.WriteFile(filepath.Join(dir, "dev"), []byte(number+"\n"), 0o644)
		if partition {
			os.WriteFile(filepath.Join(dir, "partition"), []byte("1\n"), 0o644)
		}
		for _, s := range slaves {
			os.Symlink(filepath.Join(sys, s), filepath.Join(dir, "slaves", filepath.Base(s)))
		}
		if err := os.Symlink(dir, filepath.Join(sysBlock, number)); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(dev, name), unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil {
			t.Fatal(err)
		}
	}
	device("sdb", "sdb", "8:16", 8, 16, false)
	device("sdb1", "sdb/sdb1", "8:17", 8, 17, true)
	device("sdb2", "sdb/sdb2", "8:18", 8, 18, true)
	device("dm-3", "dm-3", "253:3", 253, 3, false, "sdb/sdb2")
	device("dm-4", "dm-4", "253:4", 253, 4, false, "sdb/sdb2")
	os.MkdirAll(filepath.Join(dev, "vg"), 0o755)
	os.Symlink("../dm-3", filepath.Join(dev, "vg", "lv"))
	return dev
}

// A block device is taken from a guest when it is the guest's device by
// another name, or either is built on the other (a whole disk holds its
// partitions and what is built on them); two volumes side by side on one
// disk, or two partitions of it, are not.
func TestAttackABlockDeviceBuiltOnAGuestsIsTaken(t *testing.T) {
	dev := fakeBlockDevices(t)
	d := func(n string) string { return filepath.Join(dev, n) }
	for _, c := range []struct {
		in, victim string
		taken      bool
	}{
		{"vg/lv", "dm-3", true},
		{"sdb", "dm-3", true},
		{"sdb2", "dm-3", true},
		{"dm-3", "sdb", true},
		{"sdb", "sdb1", true},
		{"sdb1", "sdb", true},
		{"sdb1", "dm-3", false},
		{"dm-4", "dm-3", false},
		{"sdb1", "sdb2", false},
	} {
		if got := takenFrom(d(c.in), d(c.victim)); got != c.taken {
			t.Errorf("%s against the victim's %s: taken %v, want %v", c.in, c.victim, got, c.taken)
		}
	}
}

// writeQCOW2 writes a version 3 qcow2 header naming backing, of format
// (no format extension if "").
func writeQCOW2(t *testing.T, path, backing, format string) {
	h := make([]byte, 512)
	binary.BigEndian.PutUint32(h[0:], qcow2Magic)
	binary.BigEndian.PutUint32(h[4:], 3)
	binary.BigEndian.PutUint32(h[100:], 104)
	if format != "" {
		binary.BigEndian.PutUint32(h[104:], qcow2BackingFormat)
		binary.BigEndian.PutUint32(h[108:], uint32(len(format)))
		copy(h[112:], format)
	}
	if backing != "" {
		binary.BigEndian.PutUint64(h[8:], 200)
		binary.BigEndian.PutUint32(h[16:], uint32(len(backing)))
		copy(h[200:], backing)
	}
	if err := os.WriteFile(path, h, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A shut-off guest's XML names its qcow2 overlay, never the images under
// it, which its header names: those are read as the guest's shared files,
// so an incoming guest cannot take one as its own writable disk.
func TestAttackAShutOffGuestsBackingImageIsNotFree(t *testing.T) {
	dir := t.TempDir()
	base, mid, top := filepath.Join(dir, "base.raw"), filepath.Join(dir, "mid.qcow2"), filepath.Join(dir, "victim.qcow2")
	os.WriteFile(base, nil, 0o600)
	writeQCOW2(t, mid, "base.raw", "raw")
	writeQCOW2(t, top, mid, "qcow2")
	chain := backingChains([]string{top})
	if len(chain) != 2 || chain[0] != mid || chain[1] != base {
		t.Fatalf("the chain under %s: %v, want %s then %s", top, chain, mid, base)
	}
	victim := GuestFiles{Own: []string{top}, Shared: chain}
	if _, taken := TakenFrom(GuestFiles{Own: []string{base}}, map[string]GuestFiles{"victim": victim}); !taken {
		t.Error("the victim's base image was free to take as an incoming guest's own disk")
	}
	if _, taken := TakenFrom(GuestFiles{Shared: []string{base}}, map[string]GuestFiles{"victim": victim}); taken {
		t.Error("reading a base image others read was refused")
	}
	if got := backingChains([]string{base}); len(got) != 0 {
		t.Errorf("a raw image has a chain: %v", got)
	}
}

// A backing image's header is read only where its parent says it is
// qcow2: a raw image's first bytes are its guest's to write, and a header
// planted there could have ferryd open anything as root. Nor does a FIFO
// named as a backing image block the walk.
func TestAttackABackingChainFollowsOnlyWhatIsQCOW2(t *testing.T) {
	dir := t.TempDir()
	raw, top := filepath.Join(dir, "guest.raw"), filepath.Join(dir, "top.qcow2")
	writeQCOW2(t, raw, "/proc/self/environ", "qcow2") // written by the guest, inside its raw disk
	writeQCOW2(t, top, raw, "raw")
	if got := backingChains([]string{top}); len(got) != 1 || got[0] != raw {
		t.Errorf("the chain under %s: %v, want %s alone", top, got, raw)
	}
	unstated := filepath.Join(dir, "unstated.qcow2")
	writeQCOW2(t, unstated, raw, "")
	if got := backingChains([]string{unstated}); len(got) != 1 {
		t.Errorf("past a backing image of no stated format: %v", got)
	}
	fifo, overFIFO := filepath.Join(dir, "fifo"), filepath.Join(dir, "over-fifo.qcow2")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	writeQCOW2(t, overFIFO, fifo, "qcow2")
	done := make(chan []string, 1)
	go func() { done <- backingChains([]string{overFIFO}) }()
	select {
	case got := <-done:
		if len(got) != 1 || got[0] != fifo {
			t.Errorf("the chain over a FIFO: %v", got)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a FIFO named as a backing image blocked the walk")
	}
}

// A lookup stuck on a hung filesystem holds no check past lookupWait, and
// is not started again while it is stuck.
func TestAStuckLookupHoldsNoCheck(t *testing.T) {
	var m sync.Map
	release := make(chan struct{})
	defer close(release)
	var started atomic.Int32
	stuck := func() string { started.Add(1); <-release; return "answered" }
	for range 2 {
		start := time.Now()
		if got := lookupWithin(&m, "/nfs/hung.img", stuck, "as spelt"); got != "as spelt" {
			t.Fatalf("a stuck lookup answered %q", got)
		}
		if took := time.Since(start); took > lookupWait+time.Second {
			t.Fatalf("a check waited %v on a stuck lookup", took)
		}
	}
	if n := started.Load(); n != 1 {
		t.Errorf("a stuck path was looked up %d times", n)
	}
}
