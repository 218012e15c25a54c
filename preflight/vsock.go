package preflight

import (
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
)

// vsockReasons: the guest keeps its vsock CID across a migration, and a
// host's vhost-vsock hands each CID to one guest only.
func vsockReasons(v *libvirtxml.DomainVSock) []api.Blocker {
	if v == nil {
		return nil
	}
	cid := ""
	if v.CID != nil {
		cid = v.CID.Address
	}
	return []api.Blocker{blocker(CodeVsock, cid, "",
		"The guest has vsock CID %s: the migration fails if another guest on the target already holds it.", cid)}
}
