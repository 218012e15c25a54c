package libvirtx

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
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
	f.Add(guestXML("vm", "", `<serial type='file'><source path='/run/consoles/vm.log'/><log file='/run/consoles/vm-log.log'/><target port='1'/></serial>`))
	f.Add(strings.Replace(guestXML("vm", "", ""), "</kernel>", "</kernel><loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader><nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/var/lib/libvirt/images/vm_VARS.fd</nvram>", 1))
	f.Add(guestXML("vm", "", `<graphics type='vnc'><listen type='socket'/></graphics><disk type='file' device='cdrom'><source file='/var/lib/libvirt/images/x.iso'/><readonly/><target dev='sda'/></disk>`))
	f.Add(strings.Replace(guestXML("vm", "", ""), "<metadata>", "<metadata><f:x xmlns:f='urn:f'"+strings.Repeat(" a=''", 100)+"/>", 1))
	f.Fuzz(func(t *testing.T, x string) {
		canon, err := CanonicalIncomingXML(x, "vm", policyForTest)
		if err != nil {
			return
		}
		// Whose files they are is asked of every domain accepted.
		if _, err := FilesOf(canon); err != nil {
			t.Fatalf("accepted, and its files cannot be listed: %v\n%s", err, canon)
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

// Replies that pass the check are decoded by go-libvirt through ferryd's
// own calls: whatever the body, the call ends (a value or an error), and
// decoding allocates in proportion to the reply, not to a count it claims.
func FuzzReplyDecodedByGoLibvirt(f *testing.F) {
	f.Add(uint8(0), be32(0, 0x7fffffff))
	f.Add(uint8(0), append(be32(3, 1, 4), append([]byte("type"), be32(1, 2)...)...))
	f.Add(uint8(1), append(be32(1), append(domainXDR("vm"), be32(0)...)...))
	f.Add(uint8(2), be32(1, 1))
	f.Add(uint8(3), be32(5, 0x3c78783e, 0))
	calls := []struct {
		proc uint32
		call func(context.Context, *Conn) error
	}{
		{libvirtxtest.ProcDomainGetJobStats, func(ctx context.Context, c *Conn) error {
			_, err := c.JobStats(ctx, libvirt.Domain{Name: "vm"}, false)
			return err
		}},
		{libvirtxtest.ProcConnectGetAllDomainStats, func(ctx context.Context, c *Conn) error {
			_, err := c.Domains(ctx)
			return err
		}},
		{libvirtxtest.ProcDomainGetState, func(ctx context.Context, c *Conn) error {
			_, _, err := c.DomainState(ctx, libvirt.Domain{Name: "vm"})
			return err
		}},
		{libvirtxtest.ProcDomainGetXMLDesc, func(ctx context.Context, c *Conn) error {
			_, err := c.DomainXML(ctx, libvirt.Domain{Name: "vm"})
			return err
		}},
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		call := calls[int(which)%len(calls)]
		fl := libvirtxtest.New(t, "")
		fl.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
			if proc == call.proc {
				return body, nil, true
			}
			return nil, nil, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := Dial(ctx, fl.Path(), 2*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err = call.call(ctx, c)
		runtime.ReadMemStats(&after)
		if ctx.Err() != nil {
			t.Fatalf("procedure %d: the call did not end: %v", call.proc, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20+64*uint64(len(body)) {
			t.Fatalf("procedure %d: decoding a %d-byte reply allocated %d bytes (err %v)", call.proc, len(body), grew, err)
		}
	})
}
