package preflight

import (
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// A confidential guest's memory is encrypted with keys held by this host's
// processor and firmware: QEMU cannot read it to send it, and neither
// libvirt nor QEMU migrates such a guest.
func launchSecurityReasons(ls *libvirtxml.DomainLaunchSecurity) []api.Blocker {
	if ls == nil {
		return nil
	}
	kind, tech := "", "a confidential-computing technology"
	switch {
	case ls.SEV != nil:
		kind, tech = "sev", "AMD SEV"
	case ls.SEVSNP != nil:
		kind, tech = "sev-snp", "AMD SEV-SNP"
	case ls.TDX != nil:
		kind, tech = "tdx", "Intel TDX"
	case ls.S390PV != nil:
		kind, tech = "s390-pv", "IBM Secure Execution"
	}
	return []api.Blocker{blocker(CodeLaunchSecurity, kind, "",
		"The guest's memory is encrypted by %s with keys held by this host's processor and firmware: QEMU cannot read it to send it, and refuses to migrate the guest.", tech)}
}
