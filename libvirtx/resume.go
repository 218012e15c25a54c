package libvirtx

import (
	"fmt"
	"os"
	"strings"

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
// given: libvirt requires one, parses and validates it against the host's
// default QEMU for its virt type (virtType, the guest's own: a QEMU built
// without TCG refuses "qemu"), and then uses only its name to find the
// guest and its UUID to check the source's cookie; so it says no more.
func ResumeDomainXML(dom libvirt.Domain, virtType string) (string, error) {
	d := libvirtxml.Domain{Type: virtType, Name: dom.Name, UUID: UUIDString(dom.UUID),
		Memory: &libvirtxml.DomainMemory{Value: 1, Unit: "MiB"},
		OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm"}}}
	return d.Marshal()
}

// QEMUVirtType is the virt type ("kvm" or "qemu") the QEMU of pid runs its
// guest under, as its command line says: libvirt's -accel (accel= of
// -machine before it). No libvirt call: a failed incoming job holds the
// domain against those that take a job.
func QEMUVirtType(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "", err
	}
	return virtTypeOf(strings.Split(string(b), "\x00")), nil
}

func virtTypeOf(args []string) string {
	for i, a := range args {
		var accel string
		switch {
		case a == "-enable-kvm":
			return "kvm"
		case a == "-accel" && i+1 < len(args):
			accel, _, _ = strings.Cut(args[i+1], ",")
		case a == "-machine" && i+1 < len(args):
			for _, opt := range strings.Split(args[i+1], ",") {
				if v, ok := strings.CutPrefix(opt, "accel="); ok {
					accel = v
				}
			}
		}
		if accel == "kvm" || strings.HasPrefix(accel, "kvm:") {
			return "kvm"
		}
	}
	return "qemu"
}
