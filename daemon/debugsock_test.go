package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The debug socket is created with its final mode: it never appears at
// its path as something a local user could connect to first (bound, then
// chmod-ed, it did, for as long as the chmod took).
func TestDebugSocketAppearsWithItsFinalMode(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "ferry.sock")
	old := syscall.Umask(0) // the widest a bind can make it
	defer syscall.Umask(old)
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	ln, err := listenUnix(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	buf := make([]byte, 4096)
	n, _ := unix.Read(fd, buf)
	var created, moved bool
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
		if name == "ferry.sock" {
			created = created || ev.Mask&unix.IN_CREATE != 0
			moved = moved || ev.Mask&unix.IN_MOVED_TO != 0
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	if created || !moved {
		t.Errorf("the socket was created at its path (%v) rather than moved there with its mode (%v)", created, moved)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %v %v, want a 0600 socket", fi.Mode(), err)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".ferry-sock-*")); len(leftovers) > 0 {
		t.Errorf("left %v behind", leftovers)
	}
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket stays after close: %v", err)
	}
}
