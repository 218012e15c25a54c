package preflight

import (
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// interfaceReasons finds the network interfaces whose datapath is a
// device or process of this host rather than a tap QEMU opens anywhere.
// In the live XML an interface of a libvirt network shows its actual
// type, so a network's pool of VFs shows as type='hostdev' here.
func interfaceReasons(n *libvirtxml.DomainInterface) []api.Blocker {
	src := n.Source
	if src == nil {
		return nil
	}
	mac := ""
	if n.MAC != nil {
		mac = n.MAC.Address
	}
	switch {
	case src.Hostdev != nil && src.Hostdev.PCI != nil:
		addr := pciAddress(src.Hostdev.PCI.Address)
		if transientTeaming(n.Teaming) {
			return []api.Blocker{failover(addr)}
		}
		return []api.Blocker{blocker(CodePCIPassthrough, addr, "",
			"Network interface %s is PCI device %s of this host passed through to the guest (an SR-IOV VF): the device and its state stay in this host, and QEMU cannot move them unless the device's VFIO driver supports migration, which few do.", mac, addr)}
	case src.Hostdev != nil && src.Hostdev.USB != nil:
		id := usbID(src.Hostdev.USB)
		return []api.Blocker{blocker(CodeHostDevice, id, "",
			"Network interface %s is USB device %s of this host passed through to the guest: the device stays plugged in here, and the guest keeps it only if the target has the same device plugged in.", mac, id)}
	case src.VHostUser != nil:
		// With a passt backend libvirt starts the backend itself, on the
		// target as on this host.
		if n.Backend != nil && n.Backend.Type == "passt" {
			return nil
		}
		path := src.VHostUser.Dev
		if path == "" {
			path = chardevPath(src.VHostUser.Chardev)
		}
		return []api.Blocker{blocker(CodeVhostUser, mac, path,
			"Network interface %s is a vhost-user port whose backend (a userspace switch such as OVS-DPDK) runs on this host behind socket %s: QEMU moves only its own side, and the target needs the same backend and port at the same socket.", mac, path)}
	case src.VDPA != nil:
		return []api.Blocker{blocker(CodeVhostVDPA, mac, src.VDPA.Device,
			"Network interface %s is vDPA device %s of this host: its datapath state is in the device, and libvirt refuses to migrate it unless QEMU reports the device migratable.", mac, src.VDPA.Device)}
	}
	return nil
}
