package unixsock

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-vm/ferry/internal/testsock"
)

// kubevirtSocket lays out a launcher socket path exactly as the kubelet and
// KubeVirt do, under root, and pads root so the whole is want bytes.
func kubevirtSocket(t *testing.T, want int) string {
	t.Helper()
	const podUID = "6f1d0c3e-9b2a-4c1e-8e5f-2a7b9c0d1e2f"
	tail := filepath.Join("pods", podUID, "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock")
	// A root as long as /var/lib/kubelet, made directly under /tmp: a
	// TMPDIR may be longer than the whole budget.
	root, err := os.MkdirTemp("/tmp", "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if pad := want - len(root) - 1 - len(tail); pad > 1 {
		root = filepath.Join(root, strings.Repeat("k", pad-1))
	} else if pad < 0 {
		t.Fatalf("temp dir %q too long to build a %d-byte path", root, want)
	} else if pad == 1 {
		root += "k"
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(root) })
	}
	p := filepath.Join(root, tail)
	if len(p) != want {
		t.Fatalf("built a %d-byte path, want %d", len(p), want)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// listenAt serves an echo on a socket moved to path after binding at a
// short one: the inode, not the name, is what a connect reaches.
func listenAt(t *testing.T, path string) {
	t.Helper()
	short := filepath.Join(os.TempDir(), "unixsock-"+strings.ReplaceAll(t.Name(), "/", "-"))
	os.Remove(short)
	ln, err := net.Listen("unix", short)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	t.Cleanup(func() { ln.Close() })
	if err := os.Rename(short, path); err != nil {
		t.Fatal(err)
	}
	go testsock.Accept(ln, testsock.Echo)
}

func TestDialsAKubeVirtLauncherSocketAt121Bytes(t *testing.T) {
	path := kubevirtSocket(t, 121)
	listenAt(t, path)

	// The kernel's own answer to the plain dial: the reason this package exists.
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		t.Fatalf("a plain dial of a %d-byte path succeeded; the test no longer covers the limit", len(path))
	} else if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("plain dial: %v, want EINVAL", err)
	}

	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatalf("Dial(%d-byte path): %v", len(path), err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the long path: %q %v", buf, err)
	}
}

func TestDialLongPathErrorsNameThePath(t *testing.T) {
	path := kubevirtSocket(t, 140)
	_, err := Dial(context.Background(), path)
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Dial of a missing socket: %v, want ENOENT", err)
	}
	if !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "/proc/self/fd") {
		t.Errorf("error %q should name %s and not the /proc alias", err, path)
	}
}

// A pod writes its own volume: it may put a link where its socket should
// be, to another pod's launcher or the host's libvirt. DialSocket refuses a
// link at any length; Dial follows it, as connect(2) does.
func TestDialSocketRefusesALink(t *testing.T) {
	short, err := os.MkdirTemp("/tmp", "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	for _, real := range []string{kubevirtSocket(t, 121), filepath.Join(short, "virtqemud-sock")} {
		listenAt(t, real)
		link := real + "-link"
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		if c, err := DialSocket(context.Background(), link); err == nil {
			c.Close()
			t.Errorf("%d-byte path: DialSocket followed a symbolic link", len(link))
		} else if !strings.Contains(err.Error(), "not a unix socket (symbolic link): not dialed") || !strings.Contains(err.Error(), link) {
			t.Errorf("%d-byte path: refusal %q should name the link and say why", len(link), err)
		}
		c, err := DialSocket(context.Background(), real)
		if err != nil {
			t.Fatalf("DialSocket of the socket itself (%d bytes): %v", len(real), err)
		}
		c.Close()
		c, err = Dial(context.Background(), link)
		if err != nil {
			t.Fatalf("Dial through a link (%d bytes): %v", len(link), err)
		}
		c.Close()
	}
	file := filepath.Join(t.TempDir(), "virtqemud-sock")
	os.WriteFile(file, nil, 0o600)
	if _, err := DialSocket(context.Background(), file); err == nil || !strings.Contains(err.Error(), "regular file") {
		t.Errorf("DialSocket of a regular file: %v", err)
	}
}

func TestDialShortPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	if len(path) > MaxPath {
		t.Skipf("temp dir too long for a short-path test: %s", path)
	}
	listenAt(t, path)
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// Below root, where a glob's wildcards reach into what pods write, no link
// is followed on the way either: a pod's directory linked to another pod's
// socket directory does not reach that pod's libvirt. root's own links are
// the operator's, and followed.
func TestDialSocketBeneathFollowsNoLinkBelowItsRoot(t *testing.T) {
	real := kubevirtSocket(t, 121)
	listenAt(t, real)
	pods := real[:strings.Index(real, "/pods/")+len("/pods")]
	other := filepath.Join(pods, "other-pod", "volumes", "kubernetes.io~empty-dir")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	// The other pod's volume holds a link to the first pod's socket dir.
	if err := os.Symlink(filepath.Dir(real), filepath.Join(other, "libvirt-runtime")); err != nil {
		t.Fatal(err)
	}
	through := filepath.Join(other, "libvirt-runtime", "virtqemud-sock")
	if c, err := DialSocketBeneath(context.Background(), pods, through); err == nil {
		c.Close()
		t.Fatal("a socket reached through a link below the root was dialed")
	} else if !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), through) {
		t.Errorf("the refusal %q should name the path and the link", err)
	}
	c, err := DialSocketBeneath(context.Background(), pods, real)
	if err != nil {
		t.Fatalf("the socket itself: %v", err)
	}
	c.Close()
	// The root reached through a link of the operator's.
	linkedRoot := pods + "-link"
	if err := os.Symlink(pods, linkedRoot); err != nil {
		t.Fatal(err)
	}
	c, err = DialSocketBeneath(context.Background(), linkedRoot, filepath.Join(linkedRoot, strings.TrimPrefix(real, pods+"/")))
	if err != nil {
		t.Fatalf("through the root's own link: %v", err)
	}
	c.Close()
	if _, err := DialSocketBeneath(context.Background(), pods, "/etc/passwd"); err == nil || !strings.Contains(err.Error(), "not beneath") {
		t.Errorf("a path outside the root: %v", err)
	}
}
