package libvirtx

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/testenv"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// launcherPath lays out a virt-launcher's libvirt socket as the kubelet
// does, under a temporary root: past the 107 bytes a unix socket address
// holds, as the real one (121 bytes) is.
func launcherPath(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("/tmp", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	p := filepath.Join(root, "pods", "0d4c5a3e-1f2b-4c8d-9e7f-6a5b4c3d2e1f", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock")
	if len(p) <= 107 {
		t.Fatalf("%s is only %d bytes", p, len(p))
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDialReachesALauncherSocketPastTheUnixLimit(t *testing.T) {
	path := launcherPath(t)
	f := libvirtxtest.New(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, path, time.Second)
	if err != nil {
		t.Fatalf("Dial(%d-byte path): %v", len(path), err)
	}
	defer c.Close()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Socket() != path {
		t.Errorf("Socket() = %q, want the path asked for", c.Socket())
	}
	if n := len(f.Calls(libvirtxtest.ProcConnectOpen)); n != 1 {
		t.Errorf("%d connect-open calls", n)
	}
}

// A launcher's virtqemud runs as 107 in session mode and accepts only
// qemu:///session; a root daemon is asked for qemu:///system.
func TestDialAsksASessionDaemonForTheSessionURI(t *testing.T) {
	testenv.Root(t, "give a socket to uid 107, as a virt-launcher's is")
	for _, tc := range []struct {
		uid  int
		want string
	}{{0, "qemu:///system"}, {107, "qemu:///session"}} {
		path := filepath.Join(t.TempDir(), "libvirt-sock")
		f := libvirtxtest.New(t, path)
		if err := os.Lchown(path, tc.uid, tc.uid); err != nil {
			t.Fatal(err)
		}
		c, err := Dial(context.Background(), path, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		opens := f.Calls(libvirtxtest.ProcConnectOpen)
		if len(opens) != 1 || !bytes.Contains(opens[0], []byte(tc.want)) {
			t.Errorf("socket of uid %d: connect-open args %q, want %s", tc.uid, opens, tc.want)
		}
	}
}
