package libvirtx

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// Security is how a libvirt confines its QEMUs, as its capabilities say.
type Security struct {
	// Models are the security drivers libvirt runs, e.g. "none" and "dac"
	// on a host without AppArmor or SELinux, "apparmor" and "dac" on
	// Debian with AppArmor.
	Models []string
	// UID and GID are what QEMU runs as: the DAC model's base label.
	// Without a DAC model QEMU runs as libvirt's own user, root.
	UID, GID int
}

// Security asks libvirt how it runs QEMU. Files QEMU opens itself (the
// target's migration socket, the source's that it connects to) must let
// that user or group in.
func (c *Conn) Security(ctx context.Context) (Security, error) {
	caps, err := call(ctx, c, "capabilities", func(l *libvirt.Libvirt) (string, error) { return l.ConnectGetCapabilities() })
	if err != nil {
		return Security{}, err
	}
	return ParseSecurity(caps)
}

// ParseSecurity reads the security models of a capabilities document.
func ParseSecurity(capsXML string) (Security, error) {
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(capsXML); err != nil {
		return Security{}, fmt.Errorf("libvirt's capabilities do not parse: %w", err)
	}
	var s Security
	for _, m := range caps.Host.SecModel {
		s.Models = append(s.Models, m.Name)
		if m.Name != "dac" || len(m.Labels) == 0 {
			continue
		}
		// One base label per domain type (kvm, qemu); libvirt gives them
		// all the configured user and group.
		uid, gid, err := parseDACLabel(m.Labels[0].Value)
		if err != nil {
			return Security{}, fmt.Errorf("libvirt's DAC base label for %s: %w", m.Labels[0].Type, err)
		}
		s.UID, s.GID = uid, gid
	}
	return s, nil
}

// parseDACLabel reads libvirt's "+UID:+GID".
func parseDACLabel(v string) (int, int, error) {
	u, g, ok := strings.Cut(strings.TrimSpace(v), ":")
	uid, uerr := strconv.ParseUint(strings.TrimPrefix(u, "+"), 10, 31)
	gid, gerr := strconv.ParseUint(strings.TrimPrefix(g, "+"), 10, 31)
	if !ok || uerr != nil || gerr != nil {
		return 0, 0, fmt.Errorf("%q is not +UID:+GID", v)
	}
	return int(uid), int(gid), nil
}
