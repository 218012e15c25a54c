package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/proxy"
)

// TestPrepareRefusalsFromThisNode sends prepares to a ferryd whose libvirt
// is down: what the peer can be refused for before libvirt is asked (the
// XML, the flags) is refused and counted, and no answer names the node's
// libvirt socket or socket dir.
func TestPrepareRefusalsFromThisNode(t *testing.T) {
	d, _ := startDaemon(t)
	for i := 0; i < 100 && d.Proxy.Addr() == nil; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	src, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", SocketDir: t.TempDir(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	good := "<domain type='qemu'><name>vm</name><devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>"
	cases := []struct {
		name, domain, xml string
		flags             uint32
		reason, says      string
	}{
		{"host file", "vm", "<domain type='qemu'><name>vm</name><devices><disk type='file'><source file='/etc/shadow'/><target dev='vda'/></disk></devices></domain>", 1, "invalid_domain_xml", "/etc/shadow"},
		{"qemu arguments", "vm", "<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'><name>vm</name><qemu:commandline><qemu:arg value='-x'/></qemu:commandline></domain>", 1, "invalid_domain_xml", "qemu:commandline"},
		{"another name", "vm", "<domain type='qemu'><name>other</name></domain>", 1, "invalid_domain_xml", "<name>"},
		{"peer to peer", "vm", good, 1 | 2, "flags_not_allowed", "0x2"},
		{"tunnelled through libvirt", "vm", good, 1 | 4, "flags_not_allowed", "0x4"},
		{"paused on the target", "vm", good, 1 | 0x20, "flags_not_allowed", "0x20"},
		{"post-copy flag without its stream", "vm", good, 1 | 0x8000, "flags_not_allowed", "postCopy false"},
		{"libvirt down", "vm", good, 1, "libvirt_unavailable", "not connected"},
	}
	for i, c := range cases {
		before := testutil.ToFloat64(d.Proxy.RejectedCounter(c.reason))
		_, err := src.Control(context.Background(), d.Proxy.Addr().String(), proxy.ControlRequest{Op: proxy.OpPrepare,
			Migration: "m" + string(rune('a'+i)), Domain: c.domain, XML: c.xml, Flags: c.flags})
		var ce *proxy.ControlError
		if !errors.As(err, &ce) || ce.Reason != c.reason || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want a %s refusal saying %q", c.name, err, c.reason, c.says)
			continue
		}
		for _, private := range append(d.cfg.LibvirtSockets, d.cfg.ProxySocketDir, filepath.Dir(d.cfg.DebugSocket)) {
			if strings.Contains(err.Error(), private) {
				t.Errorf("%s: the refusal names %s: %v", c.name, private, err)
			}
		}
		if after := testutil.ToFloat64(d.Proxy.RejectedCounter(c.reason)); after != before+1 {
			t.Errorf("%s: ferry_proxy_rejected_total{reason=%q} went %v -> %v", c.name, c.reason, before, after)
		}
	}
	if reg := d.Proxy.Registered(); len(reg) != 0 {
		t.Fatalf("refused prepares left registrations: %+v", reg)
	}
}

// A libvirtd that answered with an error refuses as libvirt; one that did
// not answer at all is this node's hypervisor being away.
func TestPeerErrorTellsAnAbsentLibvirtFromARefusingOne(t *testing.T) {
	gone := &libvirtx.CallError{Op: "Prepare", Socket: "/run/libvirt/libvirt-sock", Err: io.ErrUnexpectedEOF}
	var r *proxy.Refusal
	if err := peerError(gone); !errors.As(err, &r) || r.Reason != reasonLibvirtUnavailable || strings.Contains(r.Msg, "/run/") {
		t.Errorf("connection lost: got %#v, want a %s refusal that names no path", err, reasonLibvirtUnavailable)
	}
	said := &libvirtx.CallError{Op: "Prepare", Socket: "/run/libvirt/libvirt-sock", Err: libvirt.Error{Code: uint32(libvirt.ErrOperationFailed), Message: "no"}}
	if err := peerError(said); errors.As(err, &r) || strings.Contains(err.Error(), "/run/") {
		t.Errorf("libvirt's own error: got %#v, want it passed on without the socket path", err)
	}
	for _, slow := range []error{libvirtx.ErrTimeout, errors.New("xdr: decoding a reply")} {
		late := &libvirtx.CallError{Op: "Prepare", Socket: "/run/libvirt/libvirt-sock", Err: slow}
		if err := peerError(late); errors.As(err, &r) {
			t.Errorf("%v: got %#v, want no unavailable refusal", slow, err)
		}
	}
	for _, cut := range []error{libvirt.ErrInterrupted, syscall.EINVAL} {
		gone := &libvirtx.CallError{Op: "Prepare", Socket: "/run/libvirt/libvirt-sock", Err: cut}
		if err := peerError(gone); !errors.As(err, &r) || r.Reason != reasonLibvirtUnavailable {
			t.Errorf("%v: got %#v, want a %s refusal", cut, err, reasonLibvirtUnavailable)
		}
	}
}

// Only a finish that found nobody at the target's proxy, or a proxy that
// never heard of the migration, says the target lost it.
func TestTargetLostOnlyFromAGoneOrForgetfulProxy(t *testing.T) {
	refused := fmt.Errorf("dial target proxy 10.77.0.2:9475: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"finish answered", nil, ""},
		{"nothing listens", refused, "nothing listening"},
		{"restarted", &proxy.ControlError{Target: "10.77.0.2:9475", Reason: proxy.ReasonUnknownMigration, Msg: "migration m-1 is not known on this node"}, "restarted"},
		{"another refusal", &proxy.ControlError{Target: "10.77.0.2:9475", Reason: "wrong_state", Msg: "unknown migration, says the peer"}, ""},
		{"timed out", fmt.Errorf("control answer from 10.77.0.2:9475: %w", context.DeadlineExceeded), ""},
	}
	for _, c := range cases {
		got := targetLost(c.err)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: targetLost = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestCPUListIsCounted(t *testing.T) {
	for list, want := range map[string]uint{"0-3,8,10-11\n": 7, "0": 1, "0-127": 128} {
		if n, ok := countCPUList(list); !ok || n != want {
			t.Errorf("%q: %d %v, want %d", list, n, ok, want)
		}
	}
	for _, bad := range []string{"", "3-1", "a-b"} {
		if _, ok := countCPUList(bad); ok {
			t.Errorf("%q counted", bad)
		}
	}
}
