// Package support is docs/support.md's matrix of libvirt and QEMU stacks
// against what Ferry does on them, as the end-to-end tests that passed
// showed it: each such test records a cell (the stacks it ran on, the
// feature, what it saw), a run writes them to FERRY_SUPPORT_DIR, and the
// matrix in docs/support.md is rendered from the cells kept in
// docs/support.json, which make test checks against the run's own.
package support

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Cell is one feature seen on one column's stacks.
type Cell struct {
	Column  string `json:"column"`
	Feature string `json:"feature"`
	Detail  string `json:"detail"`
}

// Feature is a row of the matrix.
type Feature struct {
	Key, Row string
}

// Features are the rows, in order; a cell names its row by Key.
var Features = []Feature{
	{"tracking", "tracking equal to libvirt on both nodes (phases, iterations, completed-job statistics)"},
	{"dirty-rate", "the dirty rate equal to what the guest writes"},
	{"driven-precopy", "a driven pre-copy through Ferry's proxy"},
	{"driven-postcopy", "a driven post-copy"},
	{"postcopy-userfaultfd-denied", "a post-copy in on a host with vm.unprivileged_userfaultfd=0 (Debian's default)"},
	{"postcopy-failure", "a post-copy failure reported on both nodes"},
	{"postcopy-resumed", "post-copy broken (link cut 45 s) and resumed"},
	{"postcopy-reset-twice", "post-copy streams reset twice, resumed twice"},
	{"postcopy-ferryd-killed", "a ferryd killed in post-copy on either side, resumed"},
	{"source-ferryd-killed", "the source's ferryd killed mid pre-copy: one guest"},
	{"target-ferryd-killed", "the target's ferryd killed mid pre-copy: one guest"},
	{"definition-moves", "a persistent guest's definition moves with it"},
	{"multifd-postcopy", "multifd (`--parallel`) with post-copy"},
	{"multifd-old-qemu", "multifd into the target's QEMU"},
	{"direct-path", "the direct path (QEMU's own TLS)"},
	{"launcher", "a KubeVirt launcher (the host's libvirt)"},
	{"launcher-other-stack", "KubeVirt launchers of another libvirt than the host's"},
}

// Columns are the stacks, in order: a node pair on one stack is named by
// it, a mixed pair "a → b".
var Columns = []string{"default", "newest", "oldest", "newest → oldest", "oldest → newest"}

// Column names the column of a bed whose nodes run stacks a and b.
func Column(a, b string) string {
	if a == b {
		return a
	}
	return a + " → " + b
}

// Check says what is wrong with cells: a row or column the matrix does
// not have, or one cell given two details.
func Check(cells []Cell) error {
	var errs []error
	seen := map[[2]string]string{}
	for _, c := range cells {
		if !slices.ContainsFunc(Features, func(f Feature) bool { return f.Key == c.Feature }) {
			errs = append(errs, fmt.Errorf("feature %q is no row of the matrix (test/support.Features)", c.Feature))
		}
		if !slices.Contains(Columns, c.Column) {
			errs = append(errs, fmt.Errorf("column %q is no column of the matrix (test/support.Columns)", c.Column))
		}
		k := [2]string{c.Column, c.Feature}
		if d, ok := seen[k]; ok && d != c.Detail {
			errs = append(errs, fmt.Errorf("%s on %s seen as both %q and %q", c.Feature, c.Column, d, c.Detail))
		}
		seen[k] = c.Detail
	}
	return errors.Join(errs...)
}

// Sorted is cells in the matrix's order, each once.
func Sorted(cells []Cell) []Cell {
	out := slices.Clone(cells)
	row := func(key string) int { return slices.IndexFunc(Features, func(f Feature) bool { return f.Key == key }) }
	slices.SortFunc(out, func(a, b Cell) int {
		if d := slices.Index(Columns, a.Column) - slices.Index(Columns, b.Column); d != 0 {
			return d
		}
		if d := row(a.Feature) - row(b.Feature); d != 0 {
			return d
		}
		return strings.Compare(a.Detail, b.Detail)
	})
	return slices.Compact(out)
}

// Table is the matrix in Markdown: the columns that have a cell, every
// row; a cell no test showed is "not tried".
func Table(cells []Cell) string {
	at := map[[2]string]string{}
	var cols []string
	for _, c := range cells {
		at[[2]string{c.Column, c.Feature}] = c.Detail
	}
	for _, col := range Columns {
		if slices.ContainsFunc(cells, func(c Cell) bool { return c.Column == col }) {
			cols = append(cols, col)
		}
	}
	var b strings.Builder
	b.WriteString("| feature |")
	for _, col := range cols {
		b.WriteString(" " + col + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, f := range Features {
		b.WriteString("| " + f.Row + " |")
		for _, col := range cols {
			d, ok := at[[2]string{col, f.Key}]
			if !ok {
				d = "not tried"
			}
			b.WriteString(" " + d + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Read reads the cells of a JSON file.
func Read(path string) ([]Cell, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cells []Cell
	if err := json.Unmarshal(b, &cells); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cells, nil
}

// ReadDir reads the cells of every run written into dir.
func ReadDir(dir string) ([]Cell, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no run's cells (*.json): run make test, or make support-fresh e2e e2e-stacks", dir)
	}
	var all []Cell
	for _, f := range files {
		cells, err := Read(f)
		if err != nil {
			return nil, err
		}
		all = append(all, cells...)
	}
	return Sorted(all), nil
}

// Write writes cells, sorted, to path.
func Write(path string, cells []Cell) error {
	b, err := json.MarshalIndent(Sorted(cells), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Diff lists how have differs from want, cell by cell.
func Diff(have, want []Cell) []string {
	key := func(c Cell) string { return c.Column + ": " + c.Feature }
	h, w := map[string]string{}, map[string]string{}
	for _, c := range have {
		h[key(c)] = c.Detail
	}
	for _, c := range want {
		w[key(c)] = c.Detail
	}
	var out []string
	for k, d := range w {
		switch hd, ok := h[k]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s: no test of the run showed it (the test that records it did not run: dropped from the Makefile's E2E_CORE or E2E_MIXED, or renamed), docs/support.json says %q", k, d))
		case hd != d:
			out = append(out, fmt.Sprintf("%s: the run showed %q, docs/support.json says %q", k, hd, d))
		}
	}
	for k, d := range h {
		if _, ok := w[k]; !ok {
			out = append(out, fmt.Sprintf("%s: the run showed %q, docs/support.json has no such cell", k, d))
		}
	}
	slices.Sort(out)
	return out
}
