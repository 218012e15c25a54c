package preflight

import (
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// filesystemReasons: a host directory shared into the guest is served
// from this host, and the guest's view of it (open files, locks) lives in
// the server, not in what QEMU migrates.
func filesystemReasons(fs *libvirtxml.DomainFilesystem) []api.Blocker {
	target := ""
	if fs.Target != nil {
		target = fs.Target.Dir
	}
	path := filesystemSource(fs.Source)
	if fs.Driver != nil && fs.Driver.Type == "virtiofs" {
		if fs.Source != nil && fs.Source.Mount != nil && fs.Source.Mount.Dir == "" {
			return []api.Blocker{blocker(CodeVirtiofs, target, path,
				"A host directory is shared into the guest with virtiofs through socket %s (mount tag %s): virtiofsd's state of the guest's open files stays on this host, and libvirt refuses to migrate a domain with a virtiofs device.", path, target)}
		}
		return []api.Blocker{blocker(CodeVirtiofs, target, path,
			"Host directory %s is shared into the guest with virtiofs (mount tag %s): virtiofsd's state of the guest's open files stays on this host, and libvirt refuses to migrate a domain with a virtiofs device.", path, target)}
	}
	if fs.Source == nil || fs.Source.Mount != nil {
		return []api.Blocker{blocker(CodeHostFilesystem, target, path,
			"Host directory %s is exported to the guest over 9p (mount tag %s): QEMU refuses to migrate while the guest has it mounted, since the export's open files cannot move.", path, target)}
	}
	return []api.Blocker{blocker(CodeHostFilesystem, target, path,
		"Host filesystem %s is given to the guest as %s: it is served from this host, and the guest's open files in it cannot move.", path, target)}
}

func filesystemSource(s *libvirtxml.DomainFilesystemSource) string {
	switch {
	case s == nil:
		return ""
	case s.Mount != nil:
		if s.Mount.Dir != "" {
			return s.Mount.Dir
		}
		return s.Mount.Socket
	case s.Block != nil:
		return s.Block.Dev
	case s.File != nil:
		return s.File.File
	case s.Bind != nil:
		return s.Bind.Dir
	case s.Template != nil:
		return s.Template.Name
	case s.Volume != nil:
		return s.Volume.Pool + "/" + s.Volume.Volume
	}
	return ""
}
