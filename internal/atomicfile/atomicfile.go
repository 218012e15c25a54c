// Package atomicfile replaces small state files so that a crash leaves the
// old content or the new, never a torn one.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data (mode 0600). The data goes to a fresh
// temporary file in the same directory (created exclusively, so a planted
// link is never followed), is synced, then renamed over path; the directory
// is synced so the rename itself survives a crash.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone after the rename; removes a failed attempt
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
