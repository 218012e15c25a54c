//go:build e2e

package e2e

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// assertStockQEMU checks, from the kernel's own account, that the guest's
// QEMU on node runs as a stock Debian host runs it, as libvirt-qemu and
// not root, and that Ferry's socket dir there is open to QEMU's group
// only: the target QEMU created its socket in it, the source's connected.
func assertStockQEMU(t *testing.T, node, guest string) {
	t.Helper()
	want, err := user.Lookup("libvirt-qemu")
	if err != nil {
		t.Fatalf("no libvirt-qemu user on this host: %v", err)
	}
	c, err := bed.QEMUCreds(node, guest)
	if err != nil {
		t.Fatal(err)
	}
	if strconv.Itoa(c.UID) != want.Uid || c.UID == 0 || c.GID == 0 {
		t.Fatalf("QEMU of %s on %s runs as uid %d gid %d, want libvirt-qemu (uid %s), not root", guest, node, c.UID, c.GID, want.Uid)
	}
	dir := filepath.Join(bed.Node(node).Dir, "run", "ferry", "migrationproxy")
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Gid) != c.GID || fi.Mode().Perm()&0o007 != 0 || st.Uid != 0 {
		t.Errorf("socket dir on %s: %v uid %d gid %d, want root's, open to QEMU's group %d and nobody else", node, fi.Mode(), st.Uid, st.Gid, c.GID)
	}
	t.Logf("QEMU of %s on %s runs as uid %d gid %d groups %v; socket dir %v root:%d", guest, node, c.UID, c.GID, c.Groups, fi.Mode(), st.Gid)
}
