package testbed

import (
	"bufio"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/ferry-vm/ferry/libvirtx"
)

// hostMAC says which mandatory access control libvirt finds in this
// kernel, probed as libvirt does: SELinux first, then AppArmor.
func hostMAC() (driver, why string) {
	if b, err := os.ReadFile("/sys/fs/selinux/enforce"); err == nil {
		return "selinux", "SELinux enforce=" + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil && strings.TrimSpace(string(b)) == "Y" {
		if _, err := os.Stat("/sys/kernel/security/apparmor"); err == nil {
			return "apparmor", "AppArmor enabled in this kernel"
		}
	}
	return "none", "no SELinux or AppArmor in this kernel"
}

// checkSecurity reads how the node's libvirtd runs QEMU and checks that it
// is what a stock host would do here: a user of its own, not root, and the
// host's MAC driver or none.
func (b *Bed) checkSecurity(node string) (libvirtx.Security, error) {
	l, err := b.Libvirt(node)
	if err != nil {
		return libvirtx.Security{}, err
	}
	defer l.Disconnect()
	caps, err := l.ConnectGetCapabilities()
	if err != nil {
		return libvirtx.Security{}, fmt.Errorf("testbed: libvirtd on node %s: capabilities: %w", node, err)
	}
	sec, err := libvirtx.ParseSecurity(caps)
	if err != nil {
		return sec, fmt.Errorf("testbed: libvirtd on node %s: %w", node, err)
	}
	mac, why := hostMAC()
	switch {
	case !slices.Contains(sec.Models, "dac"):
		return sec, fmt.Errorf("testbed: libvirtd on node %s runs no DAC driver (models %v): QEMU would run as root", node, sec.Models)
	case sec.UID == 0:
		return sec, fmt.Errorf("testbed: libvirtd on node %s runs QEMU as root", node)
	case !slices.Contains(sec.Models, mac):
		return sec, fmt.Errorf("testbed: libvirtd on node %s uses security drivers %v, but the host offers %s (%s)", node, sec.Models, mac, why)
	}
	return sec, nil
}

// describeSecurity is the bed's log line on how QEMU is confined.
func describeSecurity(sec libvirtx.Security) string {
	who := strconv.Itoa(sec.UID)
	if u, err := user.LookupId(who); err == nil {
		who = u.Username
	}
	mac, why := hostMAC()
	return fmt.Sprintf("QEMU as %s (uid %d, gid %d), DAC with dynamic ownership, MAC driver %s (%s)", who, sec.UID, sec.GID, mac, why)
}

// Creds is what a process runs as, from the kernel's own account.
type Creds struct {
	UID, GID int
	Groups   []int
}

// QEMUCreds reads the real user and groups of the guest's QEMU on a node
// from /proc.
func (b *Bed) QEMUCreds(node, guest string) (Creds, error) {
	p, err := b.qemuProc(node, guest)
	if err != nil {
		return Creds{}, err
	}
	return procCreds(p.PID)
}

func procCreds(pid int) (Creds, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Creds{}, err
	}
	defer f.Close()
	var c Creds
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v)
		switch {
		case k == "Uid" && len(f) > 0:
			c.UID, err = strconv.Atoi(f[0])
			seen++
		case k == "Gid" && len(f) > 0:
			c.GID, err = strconv.Atoi(f[0])
			seen++
		case k == "Groups":
			for _, g := range f {
				n, gerr := strconv.Atoi(g)
				if gerr != nil {
					return c, fmt.Errorf("testbed: pid %d: groups %q", pid, v)
				}
				c.Groups = append(c.Groups, n)
			}
		}
		if err != nil {
			return c, fmt.Errorf("testbed: pid %d: %s %q: %w", pid, k, v, err)
		}
	}
	if seen != 2 {
		return c, fmt.Errorf("testbed: pid %d: no Uid/Gid in its status", pid)
	}
	return c, sc.Err()
}
