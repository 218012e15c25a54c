package preflight

import (
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// An emulated TPM's live state travels in QEMU's migration stream; what
// stays behind is what lives outside QEMU: a host's TPM chip, an swtpm
// someone else runs, or state kept on this host's disk beyond the guest.
func tpmReasons(t *libvirtxml.DomainTPM) []api.Blocker {
	b := t.Backend
	if b == nil {
		return nil
	}
	switch {
	case b.Passthrough != nil:
		path := ""
		if b.Passthrough.Device != nil {
			path = b.Passthrough.Device.Path
		}
		return []api.Blocker{blocker(CodeTPMPassthrough, t.Model, path,
			"The guest uses this host's own TPM (%s): its keys and state never leave the chip.", path)}
	case b.External != nil:
		path := ""
		if b.External.Source != nil {
			path = chardevPath((*libvirtxml.DomainChardevSource)(b.External.Source))
		}
		return []api.Blocker{blocker(CodeTPMExternal, t.Model, path,
			"The guest's TPM is an swtpm run outside libvirt on this host (socket %s): the target needs its own, started at the same socket, before the migration begins.", path)}
	case b.Emulator != nil && b.Emulator.PersistentState == "yes":
		path := ""
		if s := b.Emulator.Source; s != nil {
			switch {
			case s.Dir != nil:
				path = s.Dir.Path
			case s.File != nil:
				path = s.File.Path
			}
		}
		return []api.Blocker{blocker(CodeTPMPersistent, t.Model, path,
			"The guest's TPM state is kept on this host's disk beyond the guest's life (persistent_state='yes'): the migration carries the live state, but the kept copy is found by the guest's next start only if the state directory is on shared storage (in KubeVirt, a ReadWriteMany backend-storage volume).")}
	}
	return nil
}
