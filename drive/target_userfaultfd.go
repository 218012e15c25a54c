package drive

import (
	"fmt"
	"os"
	"strings"
)

// unprivilegedUserfaultfd is where the kernel says whether a process
// without CAP_SYS_PTRACE may call userfaultfd(2); the setting is the
// host's, seen alike from a pod.
var unprivilegedUserfaultfd = "/proc/sys/vm/unprivileged_userfaultfd"

// postCopyIntoWhy adds to a failed Prepare of a post-copy migration why
// this node's QEMU refused it, where QEMU's own words ("Postcopy is not
// supported") do not say: QEMU before 8.1 opens no /dev/userfaultfd (which
// libvirt hands the QEMUs it starts) and asks the kernel through the
// system call, which the kernel denies an unprivileged QEMU unless the
// host allows it. Only a host that does not is named, so a QEMU refusing
// post-copy for another reason keeps its own words.
func postCopyIntoWhy(err error, postCopy bool) error {
	if err == nil || !postCopy || !strings.Contains(err.Error(), "Postcopy is not supported") {
		return err
	}
	setting, rerr := os.ReadFile(unprivilegedUserfaultfd)
	if rerr != nil || strings.TrimSpace(string(setting)) != "0" {
		return err
	}
	return fmt.Errorf("%w: this node's QEMU takes post-copy in only through the userfaultfd system call (QEMU before 8.1 opens no /dev/userfaultfd), "+
		"which the kernel denies it while vm.unprivileged_userfaultfd is 0; set it to 1 on this node, or migrate without post-copy", err)
}
