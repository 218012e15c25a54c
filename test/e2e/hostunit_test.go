//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostUnitArgumentsAreFerrydFlags: deploy/host/ferryd.service's
// ExecStart names only flags ferryd has, with values it takes (ferryd
// parses every flag before --version returns).
func TestHostUnitArgumentsAreFerrydFlags(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "host", "ferryd.service"))
	if err != nil {
		t.Fatal(err)
	}
	var exec_ string
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "ExecStart=") {
			continue
		}
		exec_ = strings.TrimPrefix(lines[i], "ExecStart=")
		for strings.HasSuffix(exec_, "\\") && i+1 < len(lines) {
			i++
			exec_ = strings.TrimSuffix(exec_, "\\") + " " + strings.TrimSpace(lines[i])
		}
	}
	argv := strings.Fields(exec_)
	if len(argv) < 2 || filepath.Base(argv[0]) != "ferryd" {
		t.Fatalf("ExecStart %q does not run ferryd with flags", exec_)
	}
	ferryd := filepath.Join(filepath.Dir(ferryctlBin), "ferryd")
	out, err := exec.Command(ferryd, append(argv[1:], "--version")...).CombinedOutput()
	if err != nil {
		t.Errorf("ferryd %s: %v\n%s", strings.Join(argv[1:], " "), err, out)
	}
}
