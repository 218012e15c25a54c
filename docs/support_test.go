package docs

import (
	"os"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/test/support"
)

// The matrix in support.md between these marks is rendered from the cells
// in support.json (see test/support).
const (
	supportBegin = "<!-- The matrix is generated from docs/support.json, the cells the end-to-end runs showed: make support-update, then make generate. -->\n"
	supportEnd   = "<!-- End of the generated matrix. -->\n"
)

func TestSupportDocIsCurrent(t *testing.T) {
	cells, err := support.Read("support.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := support.Check(cells); err != nil {
		t.Fatalf("support.json: %v", err)
	}
	doc, err := os.ReadFile("support.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(doc), supportBegin)
	_, after, ok2 := strings.Cut(rest, supportEnd)
	if !ok || !ok2 {
		t.Fatalf("support.md has no generated matrix between %q and %q", supportBegin, supportEnd)
	}
	want := before + supportBegin + "\n" + support.Table(cells) + "\n" + supportEnd + after
	if want == string(doc) {
		return
	}
	if os.Getenv("FERRY_UPDATE_DOCS") == "1" {
		if err := os.WriteFile("support.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("support.md's matrix is not the one support.json renders: make generate")
}
