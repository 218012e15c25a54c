package support

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestTableHasEveryRowAndTheColumnsThatRan(t *testing.T) {
	cells := []Cell{
		{Column: "newest", Feature: "tracking", Detail: "yes"},
		{Column: "default", Feature: "postcopy-resumed", Detail: "through Ferry's QMP monitor"},
	}
	got := Table(cells)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if lines[0] != "| feature | default | newest |" || len(lines) != 2+len(Features) {
		t.Fatalf("table:\n%s", got)
	}
	if !strings.Contains(got, "| "+Features[0].Row+" | not tried | yes |") ||
		!strings.Contains(got, "broken (link cut 45 s) and resumed | through Ferry's QMP monitor | not tried |") {
		t.Fatalf("cells misplaced:\n%s", got)
	}
}

func TestCheckNamesWhatTheMatrixDoesNotHave(t *testing.T) {
	err := Check([]Cell{
		{Column: "sideways", Feature: "tracking", Detail: "yes"},
		{Column: "newest", Feature: "teleport", Detail: "yes"},
		{Column: "newest", Feature: "tracking", Detail: "yes"},
		{Column: "newest", Feature: "tracking", Detail: "no"},
	})
	for _, want := range []string{`column "sideways"`, `feature "teleport"`, `seen as both "yes" and "no"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check: %v, want it to name %s", err, want)
		}
	}
	if err := Check([]Cell{{Column: Column("newest", "oldest"), Feature: "tracking", Detail: "yes"}}); err != nil {
		t.Errorf("a mixed pair's column: %v", err)
	}
}

func TestDiffAndRoundTrip(t *testing.T) {
	want := []Cell{{"newest", "tracking", "yes"}, {"default", "tracking", "yes"}, {"newest", "postcopy-resumed", "by libvirt's own protocol"}}
	path := filepath.Join(t.TempDir(), "cells.json")
	if err := Write(path, append(want, want[0])); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDir(filepath.Dir(path))
	if err != nil || !reflect.DeepEqual(got, Sorted(want)) || len(got) != 3 || got[0].Column != "default" {
		t.Fatalf("read back %v, %v; want %v sorted, each once", got, err, want)
	}
	have := []Cell{{"newest", "tracking", "yes"}, {"newest", "postcopy-resumed", "through Ferry's QMP monitor"}, {"oldest", "tracking", "yes"}}
	diff := Diff(have, want)
	if len(diff) != 3 || !strings.Contains(strings.Join(diff, "\n"), `showed "through Ferry's QMP monitor", docs/support.json says "by libvirt's own protocol"`) {
		t.Fatalf("diff:\n%s", strings.Join(diff, "\n"))
	}
	if _, err := ReadDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "make support-fresh e2e e2e-stacks") {
		t.Errorf("an empty run dir: %v", err)
	}
}
