package preflight

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// A host device is hardware of this host handed to the guest: its state
// is in the hardware, not in QEMU's memory, so QEMU has nothing it could
// send, and the device itself stays behind.
func hostdevReasons(h *libvirtxml.DomainHostdev) []api.Blocker {
	switch {
	case h.SubsysPCI != nil:
		addr := ""
		if h.SubsysPCI.Source != nil {
			addr = pciAddress(h.SubsysPCI.Source.Address)
		}
		if transientTeaming(h.SubsysPCI.Teaming) {
			return []api.Blocker{failover(addr)}
		}
		return []api.Blocker{blocker(CodePCIPassthrough, addr, "",
			"PCI device %s of this host is passed through to the guest: the device and its state stay in this host, and QEMU cannot move them unless the device's VFIO driver supports migration, which few do.", addr)}
	case h.SubsysMDev != nil:
		uuid := ""
		if s := h.SubsysMDev.Source; s != nil && s.Address != nil {
			uuid = s.Address.UUID
		}
		return []api.Blocker{blocker(CodeMdev, uuid, "",
			"Mediated device %s (a slice of a host device such as a vGPU) is tied to this host's physical device: QEMU can migrate one only where the vendor's driver supports it, and libvirt and KubeVirt refuse to migrate it otherwise.", uuid)}
	case h.SubsysUSB != nil:
		id := usbID(h.SubsysUSB.Source)
		return []api.Blocker{blocker(CodeHostDevice, id, "",
			"USB device %s of this host is passed through to the guest: the device stays plugged in here, and the guest keeps it only if the target has the same device plugged in.", id)}
	case h.SubsysSCSI != nil:
		id := scsiID(h.SubsysSCSI.Source)
		return []api.Blocker{blocker(CodeHostDevice, id, "",
			"SCSI device %s is passed through to the guest as this host's initiator sees it: libvirt refuses to migrate a domain with a SCSI host device.", id)}
	case h.SubsysSCSIHost != nil:
		wwpn := ""
		if s := h.SubsysSCSIHost.Source; s != nil {
			wwpn = s.WWPN
		}
		return []api.Blocker{blocker(CodeHostDevice, wwpn, "",
			"vhost-scsi target %s of this host's kernel is given to the guest: libvirt refuses to migrate a domain with one.", wwpn)}
	case h.CapsStorage != nil:
		path := ""
		if s := h.CapsStorage.Source; s != nil {
			path = s.Block
		}
		return []api.Blocker{blocker(CodeHostDevice, path, path,
			"Block device %s of this host is given to the guest (hostdev mode='capabilities'): libvirt refuses to migrate a domain with one.", path)}
	case h.CapsMisc != nil:
		path := ""
		if s := h.CapsMisc.Source; s != nil {
			path = s.Char
		}
		return []api.Blocker{blocker(CodeHostDevice, path, path,
			"Character device %s of this host is given to the guest (hostdev mode='capabilities'): libvirt refuses to migrate a domain with one.", path)}
	case h.CapsNet != nil:
		name := ""
		if s := h.CapsNet.Source; s != nil {
			name = s.Interface
		}
		return []api.Blocker{blocker(CodeHostDevice, name, "",
			"Network interface %s of this host is given to the guest (hostdev mode='capabilities'): libvirt refuses to migrate a domain with one.", name)}
	}
	return []api.Blocker{blocker(CodeHostDevice, "", "",
		"A host device of a kind this check does not know is given to the guest: libvirt migrates no host device but USB.")}
}

// transientTeaming marks a failover pair's VF: QEMU unplugs it before
// migrating and the guest runs on the virtio standby meanwhile, so libvirt
// lets such a device migrate.
func transientTeaming(t *libvirtxml.DomainInterfaceTeaming) bool {
	return t != nil && t.Type == "transient"
}

func failover(addr string) api.Blocker {
	return blocker(CodePCIFailover, addr, "",
		"PCI device %s is the passed-through half of a failover pair: QEMU unplugs it before migrating, the guest's traffic runs over its virtio standby meanwhile, and it gets a device back only if the target has a VF to plug in.", addr)
}

// pciAddress writes a PCI address as the kernel and lspci do.
func pciAddress(a *libvirtxml.DomainAddressPCI) string {
	if a == nil {
		return ""
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", deref(a.Domain), deref(a.Bus), deref(a.Slot), deref(a.Function))
}

func deref(p *uint) uint {
	if p == nil {
		return 0
	}
	return *p
}

// usbID names a USB device as lsusb does: vendor:product when the domain
// names it so, bus and device number otherwise.
func usbID(s *libvirtxml.DomainHostdevSubsysUSBSource) string {
	if s == nil {
		return ""
	}
	if s.Vendor != nil && s.Product != nil && s.Vendor.ID != "" {
		return trimHex(s.Vendor.ID) + ":" + trimHex(s.Product.ID)
	}
	if s.Address != nil {
		return fmt.Sprintf("bus %03d device %03d", deref(s.Address.Bus), deref(s.Address.Device))
	}
	return ""
}

func trimHex(id string) string {
	if len(id) > 2 && (id[:2] == "0x" || id[:2] == "0X") {
		return id[2:]
	}
	return id
}

// scsiID names a SCSI host device as lsscsi does, or its iSCSI target.
func scsiID(s *libvirtxml.DomainHostdevSubsysSCSISource) string {
	switch {
	case s == nil:
		return ""
	case s.ISCSI != nil:
		return s.ISCSI.Name
	case s.Host != nil:
		adapter := ""
		if s.Host.Adapter != nil {
			adapter = s.Host.Adapter.Name
		}
		if a := s.Host.Address; a != nil {
			return fmt.Sprintf("%s:%d:%d:%d", adapter, deref(a.Bus), deref(a.Target), deref(a.Unit))
		}
		return adapter
	}
	return ""
}
