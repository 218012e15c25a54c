package libvirtx

import (
	"testing"
)

// Packets from whatever serves a socket in the launcher glob: the check
// never panics, and what it passes is walked the same way twice.
func FuzzCheckPacket(f *testing.F) {
	f.Add(append(header(rpcRemoteProgram, 298, rpcReply, rpcStatusOK), be32(0, 0x7fffffff)...))
	f.Add(append(append(header(rpcRemoteProgram, 344, rpcReply, rpcStatusOK), be32(1)...), append(domainXDR("vm"), be32(0)...)...))
	f.Add(append(header(rpcRemoteProgram, 1, rpcReply, rpcStatusError), be32(1, 10, 1, 3, 0x61626300, 2)...))
	f.Add(append(append(header(rpcRemoteProgram, 318, rpcMessage, rpcStatusOK), be32(1)...), append(domainXDR("vm"), be32(5, 3)...)...))
	f.Fuzz(func(t *testing.T, p []byte) {
		err := checkOwn(p)
		if again := checkOwn(p); (err == nil) != (again == nil) {
			t.Fatalf("checked twice: %v, then %v", err, again)
		}
	})
}

// A peer's domain XML: the check never panics, and what it accepts it
// accepts again, unchanged, in the form it hands libvirt.
func FuzzIncomingXML(f *testing.F) {
	f.Add(guestXML("vm", "", ""))
	f.Add(guestXML("vm", "", `<interface type='bridge'><source bridge='br0'/></interface><graphics type='vnc' listen='127.0.0.1'/>`))
	f.Add(guestXML("vm", "", `<disk type='network' device='disk'><source protocol='nbd' name='x'/><target dev='vdb'/></disk>`))
	f.Add(`<domain type='kvm'><name>vm</name><memory unit='TiB'>4</memory><vcpu>4096</vcpu></domain>`)
	f.Fuzz(func(t *testing.T, x string) {
		canon, err := CanonicalIncomingXML(x, "vm", policyForTest)
		if err != nil {
			return
		}
		again, err := CanonicalIncomingXML(canon, "vm", policyForTest)
		if err != nil {
			t.Fatalf("accepted, then its canonical form refused: %v\n%s", err, canon)
		}
		if again != canon {
			t.Fatalf("the canonical form changed on a second pass:\n%s\n---\n%s", canon, again)
		}
	})
}
