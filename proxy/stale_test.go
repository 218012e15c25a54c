package proxy

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestStaleSocketsGoLiveOnesStay(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "m-live-49152-source.sock")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stale := filepath.Join(dir, "m-dead-49152-source.sock")
	dead, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	dead.(*net.UnixListener).SetUnlinkOnClose(false)
	dead.Close()
	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, nil, 0o600)

	removeStaleSockets(dir, 0, zap.NewNop())
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("a socket nobody listens on was kept")
	}
	if _, err := os.Stat(live); err != nil {
		t.Error("a listening socket was removed")
	}
	if _, err := os.Stat(other); err != nil {
		t.Error("a file that is not a migration socket was removed")
	}
}

func TestFreshSocketsAreLeftAlone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m-new-49152-source.sock")
	ln, _ := net.Listen("unix", path)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	removeStaleSockets(dir, time.Minute, zap.NewNop())
	if _, err := os.Stat(path); err != nil {
		t.Error("a socket bound a moment ago was removed before it could be listened on")
	}
}
