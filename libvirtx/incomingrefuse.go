package libvirtx

import "encoding/xml"

// Features of a domain an incoming migration may not carry wherever they
// appear, beside the allowlist of devices and back-ends (incomingallow.go):
// each hands the peer a host resource (secrets, host directories,
// scheduling and locked memory, the host's TPM or shared memory) or
// chooses how the target's QEMU is confined. A guest that needs one is
// migrated by other means.

// refusedElements are refused wherever they appear outside <metadata>.
var refusedElements = map[string]string{
	"auth":          "disk secrets are not taken from a peer",
	"encryption":    "disk secrets are not taken from a peer",
	"filesystem":    "host directories are not shared through an incoming migration",
	"sysinfo":       "the peer does not choose the guest's firmware tables",
	"vcpusched":     "real-time scheduling is the target's to choose",
	"iothreadsched": "real-time scheduling is the target's to choose",
	"emulatorsched": "real-time scheduling is the target's to choose",
	"baselabel":     "the target chooses its QEMU's security label",
	"tpm":           "TPMs (the host's, or an emulator's state) are not carried into an incoming migration",
	"shmem":         "host shared memory is not passed through an incoming migration",
}

// refusedElement says why element t, inside parent, is not accepted, or nil.
func refusedElement(t xml.StartElement, parent string) error {
	name := t.Name.Local
	for _, a := range t.Attr {
		if a.Value == "vhostuser" || a.Value == "vhost-user" {
			return refuse("<%s %s='%s'>: vhost-user back-ends are host sockets", name, a.Name.Local, a.Value)
		}
	}
	if why, ok := refusedElements[name]; ok {
		return refuse("<%s>: %s", name, why)
	}
	switch {
	case name == "locked" && parent == "memoryBacking":
		return refuse("<memoryBacking><locked/>: locked guest memory is the target's to grant")
	case name == "seclabel" && parent != "domain":
		return refuse("<%s><seclabel>: the target chooses its QEMU's security labels", parent)
	}
	return nil
}
