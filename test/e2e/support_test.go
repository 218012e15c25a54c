//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ferry-vm/ferry/test/support"
)

// docs/support.md's matrix comes from here: a test that passed records
// what it showed on the bed's stacks, and the run writes its cells into
// FERRY_SUPPORT_DIR (make test's runs do, and make test then compares them
// with the matrix: test/support).

var (
	supportMu sync.Mutex
	supportBy []supportSeen
)

// supportSeen is a cell and the test that showed it: the cell counts only
// if the test passed, every cleanup of it included.
type supportSeen struct {
	t    *testing.T
	cell support.Cell
}

// supported records, if t passes, that the bed's stacks showed feature
// (a key of support.Features) as detail.
func supported(t *testing.T, feature, detail string) {
	t.Helper()
	supportMu.Lock()
	defer supportMu.Unlock()
	supportBy = append(supportBy, supportSeen{t, support.Cell{Column: support.Column(bed.Stack("a"), bed.Stack("b")), Feature: feature, Detail: detail}})
}

// writeSupport writes the cells of the run's tests that passed, one file
// per column, into FERRY_SUPPORT_DIR, in place of an earlier run's of the
// column (make test runs each column once).
func writeSupport() error {
	dir := os.Getenv("FERRY_SUPPORT_DIR")
	supportMu.Lock()
	defer supportMu.Unlock()
	var supportCells []support.Cell
	for _, s := range supportBy {
		if !s.t.Failed() && !s.t.Skipped() {
			supportCells = append(supportCells, s.cell)
		}
	}
	if dir == "" || len(supportCells) == 0 {
		return nil
	}
	if err := support.Check(supportCells); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	byColumn := map[string][]support.Cell{}
	for _, c := range supportCells {
		byColumn[c.Column] = append(byColumn[c.Column], c)
	}
	for col, cells := range byColumn {
		path := filepath.Join(dir, strings.NewReplacer(" → ", "-to-", " ", "-").Replace(col)+".json")
		if err := support.Write(path, cells); err != nil {
			return fmt.Errorf("writing the run's support cells: %w", err)
		}
	}
	return nil
}
