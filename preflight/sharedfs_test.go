package preflight

import (
	"os"
	"path/filepath"
	"testing"
)

func TestStorageOfALocalFileIsLocal(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared, kind, err := Storage("/", p)
	if err != nil || shared || kind == "" {
		t.Fatalf("a temp file: shared %v, kind %q, %v; want local", shared, kind, err)
	}
}

// A link inside the root that points out of it resolves beneath the root,
// as it would for the QEMU whose root it is.
func TestStorageResolvesLinksBeneathTheRoot(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Storage(root, "/link"); err == nil {
		t.Fatalf("a link out of the root reached %s", outside)
	}
	if _, _, err := Storage(root, "relative"); err == nil {
		t.Fatal("a relative path was taken")
	}
}
