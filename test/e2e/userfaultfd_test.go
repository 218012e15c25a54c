//go:build e2e

package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/test/testbed"
)

// unprivilegedUserfaultfd is the host's word on whether a process without
// CAP_SYS_PTRACE may call userfaultfd(2): QEMU before 8.1 takes post-copy
// in only so, as it opens no /dev/userfaultfd (which libvirt hands newer
// QEMUs). Debian's default is 0.
const unprivilegedUserfaultfd = "/proc/sys/vm/unprivileged_userfaultfd"

// userfaultfdQEMU is the first QEMU that opens /dev/userfaultfd.
const userfaultfdQEMU = 8_001_000

// allowUserfaultfd sets the host's vm.unprivileged_userfaultfd for t's
// length and puts back what it was.
func allowUserfaultfd(t *testing.T, allow bool) {
	t.Helper()
	was, err := os.ReadFile(unprivilegedUserfaultfd)
	if err != nil {
		t.Fatal(err)
	}
	v := map[bool]string{false: "0", true: "1"}[allow]
	if err := os.WriteFile(unprivilegedUserfaultfd, []byte(v), 0o644); err != nil {
		t.Fatalf("setting vm.unprivileged_userfaultfd to %s: %v", v, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(unprivilegedUserfaultfd, was, 0o644); err != nil {
			t.Errorf("putting back vm.unprivileged_userfaultfd (%s): %v", strings.TrimSpace(string(was)), err)
		}
	})
}

// qemuOn is the version of node's QEMU, as its libvirt says.
func qemuOn(t *testing.T, node string) uint64 {
	t.Helper()
	var v uint64
	withLibvirt(t, node, func(l *libvirt.Libvirt) (err error) {
		v, err = l.ConnectGetVersion()
		return err
	})
	return v
}

// postCopyInto lets node's QEMU take post-copy in for t's length, as a
// host whose QEMU is older than 8.1 must; it says, for the support
// matrix, what that took.
func postCopyInto(t *testing.T, node string) string {
	t.Helper()
	if qemuOn(t, node) >= userfaultfdQEMU {
		return "yes"
	}
	allowUserfaultfd(t, true)
	return "yes, once the host sets vm.unprivileged_userfaultfd=1 (QEMU 7.2 opens no /dev/userfaultfd)"
}

// A post-copy into a QEMU older than 8.1, on a host that keeps the
// userfaultfd system call from unprivileged processes (Debian's default),
// is refused by the target naming the setting, and the guest stays whole
// where it was; a newer QEMU opens /dev/userfaultfd and takes it.
func TestPostCopyInWhereTheHostDeniesUserfaultfd(t *testing.T) {
	const name = "pc-uffd"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: 0, Verify: true})
	before := verifiedSoFar(t, name)
	allowUserfaultfd(t, false)
	start := time.Now()
	err := <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", PostCopyAfter: 2 * time.Second, BandwidthMiBs: holdMiBs})
	if qemu := qemuOn(t, "b"); qemu < userfaultfdQEMU {
		supported(t, "postcopy-userfaultfd-denied", "refused by the target, naming the host's setting (QEMU 7.2 opens no /dev/userfaultfd)")
		if err == nil || !strings.Contains(err.Error(), "vm.unprivileged_userfaultfd is 0") {
			t.Fatalf("post-copy into QEMU %d on a host that denies userfaultfd: %v; want the target's refusal naming the setting", qemu, err)
		}
		onlyOn(t, name, "a", "b")
		memoryIntact(t, name, before)
		return
	}
	supported(t, "postcopy-userfaultfd-denied", "yes: QEMU 8.1 and newer open /dev/userfaultfd, which libvirt gives them")
	if err != nil {
		t.Fatalf("post-copy into a QEMU that opens /dev/userfaultfd: %v", err)
	}
	assertTruth(t, name, "a", "b", start)
	memoryIntact(t, name, before)
}
