package libvirtx

import (
	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// libvirt resumes a broken post-copy itself with VIR_MIGRATE_POSTCOPY_RESUME
// through the five steps of its protocol, as `virsh migrate
// --postcopy-resume` does; it is the route that leaves the guest untainted.
// The daemon of the migration's target crashed on that route in libvirt
// 11.2 and 11.3 (fixed in 11.4, its NEWS: "Fix virtqemud crash when
// resuming failed post-copy migration"), and a target on those resumes
// through a QMP monitor of Ferry's instead.

// Bounds of the libvirts whose target crashes on libvirt's own resume.
const (
	resumeCrashFrom  = 11_002_000
	resumeCrashUntil = 11_004_000
)

// ResumesPostCopy says whether a target running libvirt of version v (as
// Ping returns it) resumes a broken post-copy by libvirt's own protocol.
func ResumesPostCopy(v uint64) bool {
	return v != 0 && (v < resumeCrashFrom || v >= resumeCrashUntil)
}

// ResumeDomainXML is the domain XML a target's Prepare of a resume is
// given: libvirt requires one, parses it, and uses only its name to find
// the guest (and its UUID to check the source's cookie), so it names the
// guest and says no more.
func ResumeDomainXML(dom libvirt.Domain) (string, error) {
	d := libvirtxml.Domain{Type: "qemu", Name: dom.Name, UUID: UUIDString(dom.UUID),
		Memory: &libvirtxml.DomainMemory{Value: 1, Unit: "MiB"},
		OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm"}}}
	return d.Marshal()
}
