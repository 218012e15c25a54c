package main

import (
	"os/exec"
	"strings"
	"testing"
)

// ferryctl speaks the debug API's contract alone: a client on a node needs
// nothing of libvirt, the daemon's logging or Kubernetes' client to build.
func TestFerryctlDependsOnTheContractOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	contract := false
	for _, d := range deps {
		for _, banned := range []string{"github.com/digitalocean/go-libvirt", "go.uber.org/zap", "k8s.io/client-go", "k8s.io/apimachinery",
			"github.com/ferry-vm/ferry/migration", "github.com/ferry-vm/ferry/daemon", "github.com/ferry-vm/ferry/libvirtx"} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("ferryctl depends on %s", d)
			}
		}
		contract = contract || d == "github.com/ferry-vm/ferry/api"
	}
	if !contract {
		t.Errorf("ferryctl does not use the api package; its dependencies: %v", deps)
	}
}
