package libvirtx

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// glob finds what filepath.Glob finds, on a pods directory of every shape
// a node (or a hostile pod) can give it.
func TestGlobFindsWhatFilepathGlobFinds(t *testing.T) {
	root := t.TempDir()
	sock := func(pod string) string {
		return filepath.Join(root, "pods", pod, "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock")
	}
	mk := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mk(sock("a"))
	mk(sock("b"))
	mk(filepath.Join(root, "pods", "c", "volumes", "kubernetes.io~empty-dir", "other", "x"))
	mk(filepath.Join(root, "pods", "d", "volumes")) // a file where a directory should be
	mk(filepath.Join(root, "pods", "e"))            // a file as a pod
	if err := os.MkdirAll(filepath.Join(root, "pods", "f", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent", sock("f")); err != nil { // a dangling link as the socket
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "pods", "a", "volumes"), filepath.Join(root, "pods", "g")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "pods", "h"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "pods", "a", "volumes"), filepath.Join(root, "pods", "h", "volumes")); err != nil { // a linked directory on the way
		t.Fatal(err)
	}
	unclean := root + "//pods/./*/volumes/kubernetes.io~empty-dir//libvirt-runtime/virtqemud-sock"
	for _, pattern := range []string{
		unclean,
		filepath.Join(root, "pods", "*", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock"),
		filepath.Join(root, "pods", "*", "volumes", "*", "*", "*"),
		filepath.Join(root, "pods", "[a-c]", "volumes", "kubernetes.io~empty-dir", "*", "*"),
		filepath.Join(root, "pods", "*"),
		filepath.Join(root, "pods", "*", "volumes"),
		filepath.Join(root, "pods", "a", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock"),
		filepath.Join(root, "pods", "nope", "*"),
		filepath.Join(root, "*", "*", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "*-sock"),
		filepath.Join(root, "pods", "[", "x"),
	} {
		want, wantErr := filepath.Glob(pattern)
		if pattern == unclean {
			// filepath.Glob finds nothing through a "." component; glob
			// takes the pattern clean.
			want, wantErr = filepath.Glob(filepath.Clean(pattern))
		}
		got, err := glob(pattern)
		if (err != nil) != (wantErr != nil) || !slices.Equal(got, want) {
			t.Errorf("glob(%s) = %q, %v; filepath.Glob: %q, %v", pattern, got, err, want, wantErr)
		}
	}
}

// A node of 250 launcher pods, each with a few volumes: glob against
// filepath.Glob (go test -bench Glob -run ^$ ./libvirtx/).
func BenchmarkGlob(b *testing.B) {
	root := b.TempDir()
	for i := range 250 {
		pod := filepath.Join(root, "pods", string(rune('a'+i%26))+string(rune('a'+i/26)))
		for _, v := range []string{"libvirt-runtime", "private", "public", "sockets"} {
			if err := os.MkdirAll(filepath.Join(pod, "volumes", "kubernetes.io~empty-dir", v), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(pod, "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock"), nil, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	pattern := filepath.Join(root, "pods", "*", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock")
	for _, c := range []struct {
		name string
		glob func(string) ([]string, error)
	}{{"filepath.Glob", filepath.Glob}, {"glob", glob}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if m, _ := c.glob(pattern); len(m) != 250 {
					b.Fatalf("%d matches", len(m))
				}
			}
		})
	}
}

// A pod's FIFO where a glob with wildcards inside its volume expects a
// directory is not opened: glob returns as filepath.Glob does.
func TestGlobDoesNotOpenAPodsFIFO(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "pods", "evil", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(vol, "trap")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	pattern := filepath.Join(root, "pods", "*", "volumes", "kubernetes.io~empty-dir", "*", "*", "*-sock")
	done := make(chan struct{})
	go func() {
		glob(pattern)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		// Unblock the open so the goroutine ends.
		if fd, err := unix.Open(fifo, unix.O_RDWR|unix.O_NONBLOCK, 0); err == nil {
			defer unix.Close(fd)
		}
		<-done
		t.Error("glob blocked on a pod's FIFO")
	}
}

// A glob's root is the directory above its first wildcard: the part of
// the pattern the operator wrote, not what pods write.
func TestGlobRootIsAboveTheFirstWildcard(t *testing.T) {
	for pattern, want := range map[string]string{
		"/var/lib/kubelet/pods/*/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock": "/var/lib/kubelet/pods",
		"/var/lib/kubelet/pods/*/volumes/*/*/virtqemud-sock":                                     "/var/lib/kubelet/pods",
		"/run//libvirt/./*.sock":    "/run/libvirt",
		"/run/libvirt/libvirt-sock": "/run/libvirt",
		"/*/x":                      "/",
	} {
		if got := globRoot(pattern); got != want {
			t.Errorf("globRoot(%s) = %s, want %s", pattern, got, want)
		}
	}
}
