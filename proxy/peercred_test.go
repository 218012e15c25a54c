package proxy

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/internal/testsock"
)

// A local socket whose other end is not of QEMU's group (here: this test,
// as a root service would be) is refused once the group is known, and
// taken while QEMU runs as root (no group).
func TestLocalPeerMustBeOfQEMUsGroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the check refuses uid 0 peers, which only root can show")
	}
	path := filepath.Join(t.TempDir(), "svc.sock")
	testsock.Serve(t, path, testsock.Hold)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := &Proxy{group: -1}
	if err := p.checkLocalPeer(c, "the memory socket of migration m1"); err != nil {
		t.Fatalf("no group known: %v", err)
	}
	p.group = 64055
	err = p.checkLocalPeer(c, "the memory socket of migration m1")
	if err == nil || !strings.Contains(err.Error(), "not a QEMU of group 64055") {
		t.Fatalf("a root peer passed as QEMU: %v", err)
	}
	// libvirtd, as root, connects the source's main channel for QEMU.
	if err := checkPeerPID(c, []int{1}, true, "the memory socket of migration m1"); err != nil {
		t.Fatalf("a root peer on a source socket: %v", err)
	}
	if err := checkPeerPID(c, []int{1}, false, "the memory socket of migration m1"); err == nil || !strings.Contains(err.Error(), "not the guest's QEMU (pid 1)") {
		t.Fatalf("pid %d passed as the guest's QEMU, pid 1: %v", os.Getpid(), err)
	}
}
