package libvirtx

import (
	"encoding/xml"
	"strings"
)

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
	"cachetune":     "the host's cache allocation (resctrl) is the target's to grant",
	"memorytune":    "the host's memory bandwidth allocation (resctrl) is the target's to grant",
	"hugepages":     "the host's huge page pools are the target's to grant",
	"vcpupin":       "pinning to host CPUs is the target's to choose",
	"emulatorpin":   "pinning to host CPUs is the target's to choose",
	"iothreadpin":   "pinning to host CPUs is the target's to choose",
	"numatune":      "placing memory on host NUMA nodes is the target's to choose",
	"reservations":  "persistent reservations run a root helper (qemu-pr-helper) or dial a socket of the peer's naming",
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
		return refuse("<%s>: %s; no ferryd option admits it: take it out of the guest's definition, or move the guest by other means", name, why)
	}
	switch {
	case name == "locked" && parent == "memoryBacking":
		return refuse("<memoryBacking><locked/>: locked guest memory is the target's to grant")
	case name == "seclabel" && parent != "domain":
		return refuse("<%s><seclabel>: the target chooses its QEMU's security labels", parent)
	case name == "vcpu" && parent == "domain":
		for _, a := range t.Attr {
			if a.Name.Local == "cpuset" {
				return refuse("<vcpu cpuset='%s'>: pinning to host CPUs is the target's to choose", a.Value)
			}
		}
	case name == "disk":
		for _, a := range t.Attr {
			switch {
			case a.Name.Local == "device" && a.Value == "lun":
				return refuse("<disk device='lun'>: SCSI pass-through hands the guest a host device's commands")
			case a.Name.Local == "rawio" || a.Name.Local == "sgio":
				return refuse("<disk %s='%s'>: raw I/O and unfiltered SG_IO are host privileges", a.Name.Local, a.Value)
			}
		}
	case name == "watchdog":
		for _, a := range t.Attr {
			if a.Name.Local == "action" && a.Value == "dump" {
				return refuse("<watchdog action='dump'>: a guest's memory is not dumped to the target's disk at a peer's word")
			}
		}
	}
	return nil
}

// RefusedFeatures says, of a domain XML, what no Ferry target takes
// whatever its options (refusedElement's features, outside <metadata>):
// the source's check warns of them before a migration is asked for. An
// unparsable XML yields none; the migration's own check says why.
func RefusedFeatures(domXML string) []string {
	dec := xml.NewDecoder(strings.NewReader(domXML))
	var stack []string
	var out []string
	metadata := 0
	for len(out) < maxRefusedFeatures {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		switch t := tok.(type) {
		case xml.StartElement:
			parent := ""
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			stack = append(stack, t.Name.Local)
			if metadata > 0 || t.Name.Local == "metadata" && len(stack) == 2 {
				metadata++
				continue
			}
			if err := refusedElement(t, parent); err != nil {
				out = append(out, strings.TrimPrefix(err.Error(), "domain XML refused: "))
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
			if metadata > 0 {
				metadata--
			}
		}
	}
	return out
}

// maxRefusedFeatures bounds what RefusedFeatures lists.
const maxRefusedFeatures = 8
