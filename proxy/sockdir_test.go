package proxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-vm/ferry/internal/testenv"
	"github.com/ferry-vm/ferry/peer"
)

// The socket dir and the source sockets go to QEMU's group, and nobody
// else: what the kernel says of the files, as a non-root QEMU meets them.
func TestSocketsGoToQEMUsGroup(t *testing.T) {
	testenv.Root(t, "chown the socket dir to QEMU's group")
	const gid = 64055
	// Not t.TempDir(): its parent is root-only.
	root, err := os.MkdirTemp("", "sockdir")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "run", "ferry", "migrationproxy")
	asked := 0
	p, err := New(Config{Listen: "127.0.0.1:0", SocketDir: dir, SocketGroup: func(context.Context) (int, error) {
		asked++
		return gid, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir %v before QEMU's group is known, want root-only", fi.Mode())
	}
	for _, id := range []string{"m-one", "m-two"} {
		s, err := p.OpenSource(id, "127.0.0.1:1", []peer.Kind{peer.KindMemory}, os.Getpid(), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close("test over")
		checkOwner(t, s.Paths[peer.KindMemory], os.ModeSocket|0o660, gid)
	}
	checkOwner(t, dir, socketDirMode, gid)
	if asked != 1 {
		t.Errorf("QEMU's group was asked for %d times, want once", asked)
	}
	// The parents QEMU must pass were made searchable.
	if err := reachable(filepath.Dir(dir), gid); err != nil {
		t.Error(err)
	}
}

func TestSocketsRefusedWhenQEMUsGroupIsUnknown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mp")
	p, err := New(Config{Listen: "127.0.0.1:0", SocketDir: dir, SocketGroup: func(context.Context) (int, error) {
		return -1, errors.New("this node's libvirt is not connected")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.OpenSource("m-x", "127.0.0.1:1", []peer.Kind{peer.KindMemory}, os.Getpid(), 0); err == nil {
		t.Fatal("source sockets opened with no group QEMU could use")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != monitorDirName {
		t.Errorf("%d entries in the socket dir, want only the monitors' directory", len(ents))
	}
}

func TestUnreachableSocketDirIsNamed(t *testing.T) {
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := reachable(parent, 64055); err == nil {
		t.Fatalf("%s (0700) passed as searchable by group 64055", parent)
	}
}

func checkOwner(t *testing.T, path string, mode os.FileMode, gid int) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != mode || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
		t.Errorf("%s: mode %v group %d, want %v group %d", path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid, mode, gid)
	}
}

// The socket dir is given to QEMU's group: a link planted where it is
// expected, or a directory someone else owns, is refused, never chown-ed.
func TestSocketDirMustBeFerrydsOwn(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "etc")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := makeSocketDir(link); err == nil || !strings.Contains(err.Error(), "not a directory of its own") {
		t.Errorf("a link as the socket dir: %v", err)
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o755 {
		t.Errorf("the link's target changed mode to %v", fi.Mode())
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	if err := makeSocketDir(open); err == nil || !strings.Contains(err.Error(), "no write for others") {
		t.Errorf("a world-writable socket dir: %v", err)
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o700)
		os.Chown(other, 107, 107)
		if err := makeSocketDir(other); err == nil || !strings.Contains(err.Error(), "belongs to uid 107") {
			t.Errorf("a socket dir of uid 107: %v", err)
		}
	}
	if err := makeSocketDir(filepath.Join(base, "fresh")); err != nil {
		t.Errorf("a fresh socket dir: %v", err)
	}
}

// A socket dir whose hidden target sockets would not fit a unix address
// is refused at start, not found out at every migration's dial: the
// target socket's hidden path is longer than the monitor's.
func TestASocketDirTooLongForItsHiddenSocketsIsRefused(t *testing.T) {
	short := "/run/ferry/migrationproxy"
	if err := monitorPathFits(short); err != nil {
		t.Errorf("%s: %v", short, err)
	}
	long := "/" + strings.Repeat("d", maxSocketPath-len(HiddenMonitorPath("", newMigrationID()))-2)
	if len(HiddenMonitorPath(long, newMigrationID())) > maxSocketPath {
		t.Fatalf("the test's dir is too long even for a monitor")
	}
	if err := monitorPathFits(long); err == nil || !strings.Contains(err.Error(), "target QEMU's migration socket") {
		t.Errorf("%d-byte socket dir: %v; want it refused for the target socket's hidden path", len(long), err)
	}
}
