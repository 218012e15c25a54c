package preflight

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// Disk is a disk whose data lives on this host, as far as the domain XML
// tells: it moves only on shared storage, or copied by the migration.
type Disk struct {
	// Target is the guest's name for the disk (vda), which libvirt's
	// block calls take.
	Target string
	// Path is the host file, block device, directory or socket behind it;
	// empty when the source is not a path (a pool volume, an NVMe
	// controller).
	Path string
	// Device is libvirt's device kind: disk, lun, cdrom or floppy.
	Device string
	// Uncopied: read-only media or a shareable disk, which no migration
	// copies: the target must see the same data at the same path.
	Uncopied bool
}

// LocalDisks lists the disks Reasons reports as local_disk, so that their
// sizes can be asked of libvirt.
func LocalDisks(def *libvirtxml.Domain) []Disk {
	if def == nil || def.Devices == nil {
		return nil
	}
	var out []Disk
	for i := range def.Devices.Disks {
		if d, _, ok := localDisk(&def.Devices.Disks[i]); ok {
			out = append(out, d)
		}
	}
	return out
}

func diskReasons(disk *libvirtxml.DomainDisk) []api.Blocker {
	var out []api.Blocker
	target := diskTarget(disk)
	src := disk.Source
	if src != nil {
		switch {
		case src.VHostUser != nil:
			out = append(out, blocker(CodeVhostUser, target, chardevPath((*libvirtxml.DomainChardevSource)(src.VHostUser)),
				"Disk %s is served by a vhost-user backend through a socket on this host: the backend and what it holds stay here, and QEMU moves only its own side of the device.", target))
		case src.VHostVDPA != nil:
			out = append(out, blocker(CodeVhostVDPA, target, src.VHostVDPA.Dev,
				"Disk %s is vDPA device %s of this host: its state is in the device, which QEMU cannot move.", target, src.VHostVDPA.Dev))
		}
		if r := src.Reservations; r != nil && r.Enabled != "no" && r.Migration != "yes" {
			// migration='yes' asks QEMU to carry the reservation across
			// and take it over from the target; without it the
			// reservation stays registered to this host's initiator.
			out = append(out, blocker(CodePersistentReservations, target, diskPath(src),
				"Disk %s uses SCSI persistent reservations, which the storage holds for this host's initiator: on another host the guest would lose the reservations it took.", target))
		}
	}
	if d, where, ok := localDisk(disk); ok {
		out = append(out, localDiskBlocker(d, where, disk))
	}
	if m := disk.Mirror; m != nil {
		job := m.Job
		if job == "" {
			job = "copy"
		}
		mpath := diskPath(m.Source)
		out = append(out, blocker(CodeBlockJob, target, mpath,
			"Disk %s has a block job running (%s%s): libvirt refuses to migrate the domain until it ends.", target, job, to(mpath)))
	}
	if disk.Transient != nil {
		out = append(out, blocker(CodeTransientDisk, target, diskPath(src),
			"Disk %s is transient: its writes go to an overlay on this host that is discarded when the guest stops, and libvirt refuses to migrate a domain with one.", target))
	}
	return out
}

func to(path string) string {
	if path == "" {
		return ""
	}
	return " to " + path
}

// localDisk follows libvirt's own judgement of which disks a migration
// without storage copy cannot take along (qemuMigrationSrcIsSafe):
// network disks are shared; a disk with no medium has nothing to move.
// Unlike libvirt it cannot ask the kernel whether a file is on a shared
// filesystem, so every file is reported and the caller decides. where
// says, for a message, where the disk's data is.
func localDisk(disk *libvirtxml.DomainDisk) (d Disk, where string, ok bool) {
	src := disk.Source
	if src == nil {
		return Disk{}, "", false
	}
	// A disk both read-only and shareable is one many guests read at
	// once, shared storage by intent; libvirt neither copies nor locks it.
	if disk.ReadOnly != nil && disk.Shareable != nil {
		return Disk{}, "", false
	}
	d = Disk{Target: diskTarget(disk), Device: disk.Device, Uncopied: disk.ReadOnly != nil || disk.Shareable != nil || disk.Device == "cdrom"}
	if d.Device == "" {
		d.Device = "disk"
	}
	switch {
	case src.File != nil:
		d.Path = src.File.File
	case src.Block != nil:
		d.Path = src.Block.Dev
	case src.Dir != nil:
		d.Path = src.Dir.Dir
	case src.Volume != nil:
		if src.Volume.Pool == "" && src.Volume.Volume == "" {
			return Disk{}, "", false
		}
		return d, fmt.Sprintf("volume %s of storage pool %s, on this host unless the pool is network storage", src.Volume.Volume, src.Volume.Pool), true
	case src.NVME != nil:
		where = "an NVMe namespace of this host"
		if p := src.NVME.PCI; p != nil {
			where = fmt.Sprintf("namespace %d of NVMe controller %s of this host", p.Namespace, pciAddress(p.Address))
		}
		return d, where, true
	case src.Network != nil:
		// Network storage is reachable from any host, unless its server
		// is this host behind a unix socket.
		d.Path = unixSocketHost(src.Network)
	}
	return d, d.Path + " on this host", d.Path != ""
}

func unixSocketHost(n *libvirtxml.DomainDiskSourceNetwork) string {
	for _, h := range n.Hosts {
		if h.Transport == "unix" && h.Socket != "" {
			return h.Socket
		}
	}
	return ""
}

func localDiskBlocker(d Disk, where string, disk *libvirtxml.DomainDisk) api.Blocker {
	if disk.Source != nil && disk.Source.Network != nil {
		return blocker(CodeLocalDisk, d.Target, d.Path,
			"Disk %s is served by a server on this host through socket %s: the target must reach the same data at the same socket, or the migration must copy the disk.", d.Target, d.Path)
	}
	// libvirt's storage copy leaves out read-only media (a cdrom always
	// is) and shareable disks, whoever else uses them.
	switch {
	case disk.ReadOnly != nil || d.Device == "cdrom":
		return blocker(CodeLocalDisk, d.Target, d.Path,
			"Read-only %s %s is %s: a migration does not copy read-only media, so the target must see the same file at the same path, on shared storage or put there beforehand.", d.Device, d.Target, where)
	case disk.Shareable != nil:
		return blocker(CodeLocalDisk, d.Target, d.Path,
			"Shareable %s %s is %s: a migration does not copy a shareable disk, so the target must see the same storage at the same path.", d.Device, d.Target, where)
	}
	return blocker(CodeLocalDisk, d.Target, d.Path,
		"Disk %s is %s: the guest can move only if the target sees the same storage (a shared filesystem or shared block device), or if the migration copies the disk.", d.Target, where)
}

func diskTarget(disk *libvirtxml.DomainDisk) string {
	if disk.Target != nil {
		return disk.Target.Dev
	}
	return ""
}

func diskPath(src *libvirtxml.DomainDiskSource) string {
	switch {
	case src == nil:
		return ""
	case src.File != nil:
		return src.File.File
	case src.Block != nil:
		return src.Block.Dev
	case src.Dir != nil:
		return src.Dir.Dir
	}
	return ""
}

func chardevPath(c *libvirtxml.DomainChardevSource) string {
	if c != nil && c.UNIX != nil {
		return c.UNIX.Path
	}
	return ""
}
