package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/metrics"
	"github.com/ferry-vm/ferry/peer"
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
	src, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", SocketDir: t.TempDir(), Metrics: proxy.Metrics(metrics.NewProxy(prometheus.NewRegistry()))})
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
		before := rejectedCount(t, d, c.reason)
		_, err := src.Control(context.Background(), d.Proxy.Addr().String(), peer.ControlRequest{Op: peer.OpPrepare,
			Migration: "m" + string(rune('a'+i)), Domain: c.domain, XML: c.xml, Flags: c.flags})
		var ce *peer.ControlError
		if !errors.As(err, &ce) || ce.Reason != c.reason || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want a %s refusal saying %q", c.name, err, c.reason, c.says)
			continue
		}
		for _, private := range append(d.cfg.LibvirtSockets, d.cfg.ProxySocketDir, filepath.Dir(d.cfg.DebugSocket)) {
			if strings.Contains(err.Error(), private) {
				t.Errorf("%s: the refusal names %s: %v", c.name, private, err)
			}
		}
		if after := rejectedCount(t, d, c.reason); after != before+1 {
			t.Errorf("%s: ferry_proxy_rejected_total{reason=%q} went %v -> %v", c.name, c.reason, before, after)
		}
	}
	if reg := d.Proxy.Registered(); len(reg) != 0 {
		t.Fatalf("refused prepares left registrations: %+v", reg)
	}
}

// rejectedCount reads ferry_proxy_rejected_total{reason} as the daemon's
// registry gives it to /metrics.
func rejectedCount(t *testing.T, d *Daemon, reason string) float64 {
	t.Helper()
	mfs, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_proxy_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
