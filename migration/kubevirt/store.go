package kubevirt

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ferry-vm/ferry/internal/atomicfile"
)

// store keeps pending marks as one JSON file each, so a mark survives a
// ferryd restart and an API server that is away for a while.
type store struct{ dir string }

func newStore(stateDir string) (*store, error) {
	dir := filepath.Join(stateDir, "marks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--state-dir %s: %w", stateDir, err)
	}
	return &store{dir: dir}, nil
}

func (s *store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// markID names a mark's file: readable, and within a file name's 255
// bytes even for a 253-character VMI name, whose long names are hashed.
func markID(m Mark) string {
	name := m.Name
	if len(name) > 100 {
		sum := sha256.Sum256([]byte(name))
		name = name[:60] + "-" + hex.EncodeToString(sum[:8])
	}
	return fmt.Sprintf("%s_%s_%s_%d", m.Kind, m.Namespace, name, m.Detected.UnixNano())
}

// checkID keeps a mark's file a plain name in the store's directory.
func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." || !filepath.IsLocal(id+".json") {
		return fmt.Errorf("mark ID %q is not a plain file name", id)
	}
	return nil
}

// save writes atomically: a crash leaves the old file or the new one.
func (s *store) save(m Mark) error {
	if err := checkID(m.ID); err != nil {
		return err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(s.path(m.ID), b)
}

// park moves a mark's file into refused/, out of what load reads, and
// returns where it now is.
func (s *store) park(m Mark) (string, error) {
	if err := checkID(m.ID); err != nil {
		return "", err
	}
	dir := filepath.Join(s.dir, "refused")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	to := filepath.Join(dir, m.ID+".json")
	err := os.Rename(s.path(m.ID), to)
	if os.IsNotExist(err) {
		// Never saved (a full disk at Report): write it there now.
		b, merr := json.MarshalIndent(m, "", "  ")
		if merr != nil {
			return "", merr
		}
		err = atomicfile.Write(to, b)
	}
	return to, err
}

func (s *store) remove(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	err := os.Remove(s.path(id))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// load returns the pending marks, oldest first; unreadable files are
// reported, not deleted, so nothing recorded is lost to a bug.
func (s *store) load() ([]Mark, []error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, []error{err}
	}
	var marks []Mark
	var errs []error
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var m Mark
		if err := json.Unmarshal(b, &m); err != nil {
			errs = append(errs, fmt.Errorf("pending mark %s is unreadable (left in place): %w", e.Name(), err))
			continue
		}
		// A file is taken only as what save would have written there.
		if err := m.validate(); err != nil || m.ID+".json" != e.Name() {
			errs = append(errs, fmt.Errorf("pending mark %s is not a mark of its own name (left in place): %v", e.Name(), err))
			continue
		}
		marks = append(marks, m)
	}
	sort.Slice(marks, func(i, j int) bool { return marks[i].Detected.Before(marks[j].Detected) })
	return marks, errs
}
