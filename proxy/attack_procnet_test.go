package proxy

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
)

// /proc/net/unix is split on blanks, so a socket dir whose path has a
// space never matches a listener: at ferryd's start every hidden monitor,
// live ones too, is removed, and each held split loses its recovery.
func TestAttackMonitorInADirWithASpaceIsRemovedWhileListening(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a b")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := makeMonitorDir(dir); err != nil {
		t.Fatal(err)
	}
	name := "m-qmp.sock"
	ln, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	defer ln.Close()
	if err := os.Rename(filepath.Join(dir, name), filepath.Join(dir, monitorDirName, name)); err != nil {
		t.Fatal(err)
	}
	removeStaleMonitors(dir, 0, zap.NewNop())
	if _, err := os.Lstat(filepath.Join(dir, monitorDirName, name)); err != nil {
		t.Fatalf("a monitor its QEMU listens on was removed: %v", err)
	}
}
