package api

import (
	"os/exec"
	"strings"
	"testing"
)

// The contract builds from the standard library alone, so that any client
// can take it.
func TestContractImportsOnlyTheStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if d != "github.com/ferry-vm/ferry/api" {
			t.Errorf("package api depends on %s", d)
		}
	}
}
