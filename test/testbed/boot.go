package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// BootLibvirtd stops the node's libvirtd and starts it as a booted host
// does: without its "autostarted" marker in /run/libvirt/qemu, so it
// starts every domain whose autostart is on. The guests that run keep
// running, as the ones a real boot ended would not; it is what libvirtd
// does with the definitions it holds that a test looks at.
func (b *Bed) BootLibvirtd(ctx context.Context, node string) error {
	if err := b.StopLibvirtd(node); err != nil {
		return err
	}
	marker := filepath.Join(b.nodes[node].Dir, "run", "libvirt", "qemu", "autostarted")
	if err := os.Remove(marker); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := b.StartLibvirtd(ctx, node); err != nil {
		return err
	}
	logf(b.cfg.Log, "libvirtd on node %s started as after a boot (it autostarts what it holds)", node)
	return nil
}

// ReadOnlyLibvirtConfig makes the node's /etc/libvirt/qemu read-only, as a
// full or read-only root filesystem does, until restore is called:
// libvirtd there can save no domain definition.
func (b *Bed) ReadOnlyLibvirtConfig(node string) (restore func() error, err error) {
	return b.readOnly(node, "/etc/libvirt/qemu")
}

// ReadOnlyStateDir makes the node's ferryd state dir read-only, as a full
// or read-only disk does, until restore is called: ferryd there can keep
// no new record, and reads what it kept.
func (b *Bed) ReadOnlyStateDir(node string) (restore func() error, err error) {
	n, ok := b.nodes[node]
	if !ok {
		return nil, fmt.Errorf("testbed: no node %q", node)
	}
	return b.readOnly(node, filepath.Join(n.Dir, "state"))
}

// readOnly bind-mounts dir read-only over itself in the node's mount
// namespace, which its daemons see and the host does not.
func (b *Bed) readOnly(node, dir string) (restore func() error, err error) {
	mount := func(script string) error {
		argv, err := b.nsenter(node, "sh", "-c", script)
		if err != nil {
			return err
		}
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("testbed: %s on node %s: %v: %s", script, node, err, out)
		}
		return nil
	}
	if err := mount("mkdir -p " + dir + " && mount --bind " + dir + " " + dir + " && mount -o remount,bind,ro " + dir); err != nil {
		return nil, err
	}
	logf(b.cfg.Log, "node %s: %s is read-only", node, dir)
	return func() error { return mount("umount " + dir) }, nil
}

// QEMUCount counts the QEMU processes of a guest on the whole machine,
// from their command lines: what a libvirt that lost track of one cannot
// hide.
func QEMUCount(guest string) (int, error) {
	if err := checkGuestName(guest); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := []byte("guest=" + guest + ",")
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(cmd, []byte{0})
		if len(args) == 0 || !bytes.Contains(args[0], []byte("qemu-system")) {
			continue
		}
		for _, a := range args {
			if bytes.HasPrefix(a, want) {
				n++
				break
			}
		}
	}
	return n, nil
}
