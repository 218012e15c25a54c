package client

import (
	"os/exec"
	"strings"
	"testing"
)

// The client builds from the contract, the socket dialer and the standard
// library, so that any program on a node can take it.
func TestClientDependsOnTheContractAndTheDialerOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := map[string]bool{
		"github.com/ferry-vm/ferry/api/client":        true,
		"github.com/ferry-vm/ferry/api":               true,
		"github.com/ferry-vm/ferry/internal/unixsock": true,
		// unixsock's, for dialing past sun_path's length.
		"golang.org/x/sys/unix": true,
	}
	for _, d := range strings.Fields(string(out)) {
		if !allowed[d] {
			t.Errorf("package client depends on %s", d)
		}
	}
}
