package testbed

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func initrdPath(cacheDir string) string { return filepath.Join(cacheDir, "initrd.gz") }

// ensureInitrd rebuilds the initramfs whenever test/guest's source changed.
func ensureInitrd(ctx context.Context, cfg Config) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	src := filepath.Join(root, "test", "guest")
	key, err := sourceKey(src)
	if err != nil {
		return err
	}
	dst := initrdPath(cfg.CacheDir)
	if old, err := os.ReadFile(dst + ".key"); err == nil && string(old) == key {
		if _, err := os.Stat(dst); err == nil {
			return nil
		}
	}
	logf(cfg.Log, "building guest initramfs from %s", src)
	tmp, err := os.MkdirTemp(cfg.CacheDir, "initrd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "init")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./test/guest")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building guest init: %v: %s", err, strings.TrimSpace(string(out)))
	}
	init, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := writeInitramfs(&buf, init); err != nil {
		return err
	}
	if err := os.WriteFile(dst+".tmp", buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		return err
	}
	return os.WriteFile(dst+".key", []byte(key), 0o644)
}

func sourceKey(dir string) (string, error) {
	all, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var files []string
	for _, f := range all {
		if !strings.HasSuffix(f, "_test.go") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no guest sources in %s", dir)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeInitramfs emits a gzip'd newc cpio holding /init, the mount points it
// needs and /dev/console (the kernel opens it for init before devtmpfs exists).
// Written here rather than with cpio(1) so no host tool and no mknod are needed.
func writeInitramfs(w io.Writer, init []byte) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	entries := []struct {
		name       string
		mode       uint32
		rmaj, rmin uint32
		data       []byte
	}{
		{name: "dev", mode: 0o040755},
		{name: "proc", mode: 0o040755},
		{name: "dev/console", mode: 0o020600, rmaj: 5, rmin: 1},
		{name: "init", mode: 0o100755, data: init},
		{name: "TRAILER!!!"},
	}
	for i, e := range entries {
		nlink := 1
		if e.mode&0o040000 != 0 {
			nlink = 2
		}
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			i+1, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, e.rmaj, e.rmin, len(e.name)+1, 0)
		if _, err := io.WriteString(zw, hdr+e.name+"\x00"+pad4(len(hdr)+len(e.name)+1)); err != nil {
			return err
		}
		if _, err := zw.Write(e.data); err != nil {
			return err
		}
		if _, err := io.WriteString(zw, pad4(len(e.data))); err != nil {
			return err
		}
	}
	return zw.Close()
}

func pad4(n int) string { return strings.Repeat("\x00", (4-n%4)%4) }
