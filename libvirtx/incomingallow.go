package libvirtx

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"libvirt.org/go/libvirtxml"
)

// IncomingPolicy is what this node lets the domain of an incoming
// migration bring. Everything not named here is refused: a peer holding a
// cluster certificate is still a peer, and the target's libvirt acts on
// the XML as root.
type IncomingPolicy struct {
	// AllowedPaths are the directories local files may be in; a path is
	// resolved beneath them without following links.
	AllowedPaths []string
	// ConsoleDirs are the directories, of console files only, where a
	// file chardev or a chardev's log may be: QEMU creates or truncates
	// it at Prepare, so one in AllowedPaths could be another guest's disk.
	ConsoleDirs []string
	// AllowedBridges are the host bridges an interface may join.
	AllowedBridges []string
	// AllowedNetworks are the node's libvirt networks an interface may
	// join: a network can pass host devices or macvtap a host NIC.
	AllowedNetworks []string
	// MaxMemoryKiB and MaxVCPUs bound the guest (the node's own size);
	// zero leaves that bound off.
	MaxMemoryKiB uint64
	MaxVCPUs     uint
}

// allowedDevices are the children of <devices> a migrated guest may have:
// the emulator, its disks and NICs (their back-ends checked below), and
// devices QEMU emulates without anything of the host. Host devices,
// shared directories, host memory and TPMs, vsock and the like are not.
var allowedDevices = []string{"emulator", "disk", "controller", "interface", "serial", "console", "channel",
	"input", "graphics", "video", "sound", "audio", "memballoon", "rng", "watchdog", "panic", "iommu", "hub", "redirdev"}

// allowedTypes are the back-ends each device may use, by its type.
var allowedTypes = map[string][]string{
	// Network disks would reach storage with the target's own address
	// and trust; directories are host trees.
	"disk": {"file", "block"},
	// User networking reaches the host's loopback and forwards host ports;
	// direct, ethernet, UDP, multicast and socket NICs are host sockets
	// and devices.
	"interface": {"network", "bridge"},
	// A file back-end is a host file QEMU opens for writing at Prepare,
	// a dry run's too: it is checked against the console dirs.
	"serial":  {"pty", "file", "null"},
	"console": {"pty", "file", "null"},
	// spicevmc goes to the SPICE client, over the display's own
	// connection; a unix channel is a guest agent's, in libvirt's directory.
	"channel":  {"pty", "file", "null", "unix", "spicevmc"},
	"redirdev": {"spicevmc"},
	"parallel": {"pty", "file", "null"},
	"graphics": {"vnc", "spice"},
	"audio":    {"none", "spice"},
	"input":    {"mouse", "keyboard", "tablet"},
}

// allowElement says why element t (its parent named parent, the device it
// is in named device, with that device's type) is not allowed, or nil.
func allowElement(t xml.StartElement, parent, device, deviceType string, pol IncomingPolicy) error {
	name := t.Name.Local
	attr := func(n string) (string, bool) {
		for _, a := range t.Attr {
			if a.Name.Local == n && a.Name.Space == "" {
				return a.Value, true
			}
		}
		return "", false
	}
	typ, _ := attr("type")
	if parent == "devices" {
		if !slices.Contains(allowedDevices, name) {
			el := name
			if typ != "" {
				el = fmt.Sprintf("%s type='%s'", name, typ)
			}
			return refuse("<devices><%s>: not among the devices an incoming migration may bring (%s)", el, strings.Join(allowedDevices, ", "))
		}
		if types, ok := allowedTypes[name]; ok && !slices.Contains(types, typ) {
			return refuse("<%s type='%s'>: an incoming migration's %s may be of type %s only", name, typ, name, strings.Join(types, ", "))
		}
	}
	// A storage back-end by any name, at any depth (a backing store, a
	// mirror, an NVRAM, a data store): the target would reach storage with
	// its own address and trust.
	if storageSources[name] && slices.Contains(remoteStorage, typ) {
		return refuse("<%s type='%s'>: an incoming migration's storage is local files and block devices only", name, typ)
	}
	switch {
	case name == "mirror":
		return refuse("<mirror>: a block copy is not carried into an incoming migration")
	case name == "source" && device == "interface" && deviceType == "network":
		net, _ := attr("network")
		if !slices.Contains(pol.AllowedNetworks, net) {
			return refuse("<interface type='network'><source network='%s'>: not a network this node lets migrated guests join (--migration-allowed-network)", net)
		}
		for _, a := range []string{"portgroup", "portid"} {
			if v, ok := attr(a); ok {
				return refuse("<interface type='network'><source %s='%s'>: a peer does not choose the network's port", a, v)
			}
		}
	case name == "source" && device == "channel" && deviceType == "unix":
		// libvirt drops the path it made from a migratable definition;
		// one named by a peer would be a host socket to bind or reach.
		if path, ok := attr("path"); ok {
			return refuse("<channel type='unix'><source path='%s'>: a channel's socket is libvirt's to place", path)
		}
		if mode, _ := attr("mode"); mode != "bind" {
			return refuse("<channel type='unix'><source mode='%s'>: a channel connects to nothing of the host", mode)
		}
	case name == "virtualport":
		return refuse("<virtualport>: a peer does not choose the switch port (Open vSwitch interface ID) its NIC takes")
	case name == "source" && device == "interface" && deviceType == "bridge":
		br, _ := attr("bridge")
		if !slices.Contains(pol.AllowedBridges, br) {
			return refuse("<interface type='bridge'><source bridge='%s'>: not a bridge this node lets migrated guests join (--migration-allowed-bridge)", br)
		}
	case name == "backend" && device == "rng":
		if m, _ := attr("model"); m != "random" && m != "builtin" {
			return refuse("<rng><backend model='%s'>: only the host's random devices and QEMU's own generator are taken", m)
		}
	case name == "smbios":
		if m, _ := attr("mode"); m != "emulate" {
			return refuse("<smbios mode='%s'>: the guest does not get the host's SMBIOS tables", m)
		}
	case name == "launchSecurity":
		return refuse("<launchSecurity>: memory encryption is set up on the target, not asked for by a peer")
	case device == "graphics" && (name == "graphics" || name == "listen"):
		if addr, ok := attr("listen"); ok && name == "graphics" && !loopback(addr) {
			return refuse("<graphics listen='%s'>: a migrated guest's display listens on loopback only", addr)
		}
		// QEMU unlinks whatever is at a display socket's path before it
		// binds, at Prepare: libvirt places the socket itself.
		if path, ok := attr("socket"); ok {
			return refuse("<graphics socket='%s'>: a display's socket is libvirt's to place", path)
		}
		if name == "listen" {
			switch typ {
			case "address":
				if addr, _ := attr("address"); !loopback(addr) {
					return refuse("<graphics><listen address='%s'>: a migrated guest's display listens on loopback only", addr)
				}
			case "socket", "none":
			default:
				return refuse("<graphics><listen type='%s'>: a migrated guest's display listens on loopback or a socket only", typ)
			}
		}
	}
	return nil
}

// storageSources are the elements whose type selects a storage back-end.
var storageSources = map[string]bool{"disk": true, "backingStore": true, "mirror": true, "nvram": true, "dataStore": true, "source": true}

// remoteStorage are the back-ends reached over the network or through
// host storage management, never a local file or block device.
var remoteStorage = []string{"network", "volume", "nvme", "vhostuser", "vhostvdpa", "dir"}

// loopback: an empty address is the node's own default (qemu.conf's
// vnc_listen and spice_listen, loopback unless its operator says else).
func loopback(addr string) bool {
	if addr == "" || addr == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(addr)
	return err == nil && a.IsLoopback()
}

// checkSizes bounds the guest by what the node can hold.
// GuestMemoryKiB is a domain's memory as libvirt sizes it: <memory>, or
// the sum of its NUMA cells where that says more (libvirt takes the sum).
func GuestMemoryKiB(d *libvirtxml.Domain) (uint64, error) {
	var size uint64
	if m := d.Memory; m != nil {
		kib, err := memoryKiB(m.Value, m.Unit)
		if err != nil {
			return 0, err
		}
		size = kib
	}
	if d.CPU != nil && d.CPU.Numa != nil {
		var sum uint64
		for _, c := range d.CPU.Numa.Cell {
			kib, err := memoryKiB(c.Memory, c.Unit)
			if err != nil {
				return 0, err
			}
			if sum+kib < sum {
				return 0, fmt.Errorf("the NUMA cells' memory overflows")
			}
			sum += kib
		}
		size = max(size, sum)
	}
	return size, nil
}

func checkSizes(d *libvirtxml.Domain, pol IncomingPolicy) error {
	if pol.MaxMemoryKiB > 0 {
		type size struct {
			what string
			v    uint
			unit string
		}
		var sizes []size
		if m := d.Memory; m != nil {
			sizes = append(sizes, size{"memory", m.Value, m.Unit})
		}
		if m := d.CurrentMemory; m != nil {
			sizes = append(sizes, size{"currentMemory", m.Value, m.Unit})
		}
		if m := d.MaximumMemory; m != nil {
			sizes = append(sizes, size{"maxMemory", m.Value, m.Unit})
		}
		for _, m := range sizes {
			if kib, err := memoryKiB(m.v, m.unit); err != nil || kib > pol.MaxMemoryKiB {
				return refuse("<%s unit='%s'>%d</%s>: more than this node's %d KiB", m.what, m.unit, m.v, m.what, pol.MaxMemoryKiB)
			}
		}
		if kib, err := GuestMemoryKiB(d); err != nil || kib > pol.MaxMemoryKiB {
			return refuse("the guest's NUMA cells together have more memory than this node's %d KiB", pol.MaxMemoryKiB)
		}
	}
	if pol.MaxVCPUs > 0 && d.VCPU != nil && d.VCPU.Value > pol.MaxVCPUs {
		return refuse("<vcpu>%d</vcpu>: more than this node's %d CPUs", d.VCPU.Value, pol.MaxVCPUs)
	}
	return checkHostShares(d, pol)
}

// sharesPerVCPU is the CPU weight a guest may state per vCPU: libvirt's
// default for a whole host CPU (cgroup v2's weight 100).
const sharesPerVCPU = 1024

// checkHostShares bounds what of the host's threads and CPU time a guest
// states for itself: each I/O thread and NUMA cell is the host's to run,
// and CPU shares above a vCPU's weight put the guest ahead of its
// neighbours. (Quotas and periods only hold the guest back.)
func checkHostShares(d *libvirtxml.Domain, pol IncomingPolicy) error {
	vcpus := uint(1)
	if d.VCPU != nil && d.VCPU.Value > 0 {
		vcpus = d.VCPU.Value
	}
	if pol.MaxVCPUs > 0 {
		n := d.IOThreads
		if d.IOThreadIDs != nil {
			n = max(n, uint(len(d.IOThreadIDs.IOThreads)))
		}
		if n > pol.MaxVCPUs {
			return refuse("<iothreads>%d</iothreads>: more I/O threads than this node's %d CPUs", n, pol.MaxVCPUs)
		}
		if d.CPU != nil && d.CPU.Numa != nil && uint(len(d.CPU.Numa.Cell)) > pol.MaxVCPUs {
			return refuse("%d NUMA cells: more than this node's %d CPUs", len(d.CPU.Numa.Cell), pol.MaxVCPUs)
		}
	}
	if t := d.CPUTune; t != nil && t.Shares != nil && t.Shares.Value > sharesPerVCPU*vcpus {
		return refuse("<cputune><shares>%d</shares>: more than %d per vCPU would weigh the guest above its neighbours", t.Shares.Value, sharesPerVCPU)
	}
	return nil
}

// checkBackingChains requires a non-raw disk's backing chain to be stated:
// a qcow2 image with no <backingStore> has libvirt follow whatever backing
// file the image's own header names.
func checkBackingChains(d *libvirtxml.Domain) error {
	if d.Devices == nil {
		return nil
	}
	for _, disk := range d.Devices.Disks {
		dev := "?"
		if disk.Target != nil {
			dev = disk.Target.Dev
		}
		if disk.Source == nil {
			continue
		}
		format := ""
		if disk.Driver != nil {
			format = disk.Driver.Type
		}
		if format != "" && format != "raw" && disk.BackingStore == nil {
			return refuse("<disk> %s of format %s with no <backingStore>: libvirt would follow the backing file the image itself names; state the chain, or use raw", dev, format)
		}
		for bs := disk.BackingStore; bs != nil; bs = bs.BackingStore {
			if bs.Source != nil && bs.Format != nil && bs.Format.Type != "raw" && bs.BackingStore == nil {
				return refuse("<disk> %s: a <backingStore> of format %s with no <backingStore> of its own", dev, bs.Format.Type)
			}
		}
	}
	return nil
}

// blockDeviceLink allows one link: the last name under an allowed
// directory of /dev, which udev and LVM make (/dev/vg/lv, /dev/disk/by-id/…)
// and only root can write, when it names a block device.
func blockDeviceLink(root, path string) bool {
	if root != "/dev" && !strings.HasPrefix(root, "/dev/") {
		return false
	}
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK
}

// memoryKiB converts a libvirt memory size to KiB.
// MemoryKiB is a libvirt memory size in KiB.
func MemoryKiB(v uint, unit string) (uint64, error) { return memoryKiB(v, unit) }

func memoryKiB(v uint, unit string) (uint64, error) {
	mult := map[string]uint64{"": 1 << 10, "b": 1, "bytes": 1, "KB": 1000, "k": 1 << 10, "KiB": 1 << 10,
		"MB": 1000 * 1000, "M": 1 << 20, "MiB": 1 << 20, "GB": 1000 * 1000 * 1000, "G": 1 << 30, "GiB": 1 << 30,
		"TB": 1000 * 1000 * 1000 * 1000, "T": 1 << 40, "TiB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	bytes := uint64(v) * mult
	if bytes/mult != uint64(v) {
		return 0, errors.New("overflows")
	}
	return bytes / 1024, nil
}

// noLinksBeneath walks path down from root, one component at a time and
// never following a link: a file under an allowed directory that is a
// link to /etc/shadow would be opened by libvirt as root all the same. A
// component that does not exist yet ends the walk (libvirt creates it, or
// fails).
func noLinksBeneath(root, path string) error {
	rel, err := filepath.Rel(root, path)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return fmt.Errorf("not beneath %s", root)
	}
	if rel == "." {
		return nil
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", root, err)
	}
	at := root
	comps := strings.Split(rel, string(os.PathSeparator))
	for i, comp := range comps {
		next, err := unix.Openat(fd, comp, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("opening %s: %w", filepath.Join(at, comp), err)
		}
		at = filepath.Join(at, comp)
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(next)
			if i == len(comps)-1 && blockDeviceLink(root, path) {
				return nil
			}
			return fmt.Errorf("%s is a symbolic link", at)
		}
		fd = next
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		// Another name of the same file may be anywhere on the
		// filesystem: /etc/shadow by a second name is /etc/shadow.
		if st.Nlink > 1 {
			return fmt.Errorf("%s has %d names (hard links)", path, st.Nlink)
		}
	case unix.S_IFDIR, unix.S_IFBLK:
	default:
		return fmt.Errorf("%s is neither a file, a directory nor a block device", path)
	}
	return nil
}
