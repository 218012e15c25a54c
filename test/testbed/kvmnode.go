package testbed

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// stockKVMNode makes a /dev/kvm for the node as a stock host's udev rule
// leaves it, root:kvm 0660, when the machine's own is not: QEMU's user is
// in group kvm, and libvirt, which sees KVM as root but not as QEMU's
// user, would otherwise probe QEMU again before every guest start (45 s).
// It returns the node file to mount over /dev/kvm, or "" when the host's
// is already stock or there is no KVM or no kvm group.
func stockKVMNode(dir string) (string, error) {
	fi, err := os.Stat("/dev/kvm")
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return "", nil
	}
	grp, err := user.LookupGroup("kvm")
	if err != nil {
		return "", nil
	}
	gid, err := strconv.Atoi(grp.Gid)
	if err != nil {
		return "", nil
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Gid) == gid && fi.Mode().Perm() == 0o660 {
		return "", nil
	}
	node := filepath.Join(dir, "kvm")
	_ = os.Remove(node)
	if err := unix.Mknod(node, unix.S_IFCHR|0o660, int(st.Rdev)); err != nil {
		return "", err
	}
	if err := os.Chown(node, 0, gid); err != nil {
		return "", err
	}
	return node, os.Chmod(node, 0o660)
}
