//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/test/testbed"
)

// A peer holding a valid certificate (node a's) sends node b's proxy a
// prepare for each class of host access the allowlist refuses. Each is
// refused naming what it refused, and node b's libvirt never hears of the
// domain.
func TestAPeerCannotPrepareAGuestThatReachesTheHost(t *testing.T) {
	// A file b allows, and a link beside it to one it does not.
	consoles := filepath.Join(bed.Node("b").Dir, "run", "consoles")
	if err := os.Symlink("/etc/shadow", filepath.Join(consoles, "hostile.log")); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(consoles, "hostile.log"))
	domain := func(devices string) string {
		return `<domain type='qemu'><name>hostile</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>` + devices + `</devices></domain>`
	}
	for _, tc := range []struct{ name, xml, says string }{
		{"a raw host socket", domain(`<interface type='udp'><source address='127.0.0.1' port='2379'><local address='127.0.0.1' port='1111'/></source></interface>`), "<interface type='udp'>"},
		{"user networking", domain(`<interface type='user'/>`), "<interface type='user'>"},
		{"network storage", domain(`<disk type='network' device='disk'><source protocol='nbd' name='x'><host name='127.0.0.1' port='10809'/></source><target dev='vda'/></disk>`), "<disk type='network'>"},
		{"a link out of an allowed directory", domain(`<serial type='file'><source path='/run/consoles/hostile.log'/><target port='0'/></serial>`), "symbolic link"},
		{"a display for all", domain(`<graphics type='vnc' listen='0.0.0.0'/>`), "<graphics listen='0.0.0.0'>"},
		{"more memory than the node", strings.Replace(domain(""), "<memory unit='MiB'>128</memory>", "<memory unit='TiB'>4</memory>", 1), "more than this node's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := prepareAsNodeA(t, peer.ControlRequest{Op: peer.OpPrepare, Migration: "hostile", Domain: "hostile", XML: tc.xml, Flags: 1})
			if resp.Reason != "invalid_domain_xml" || !strings.Contains(resp.Error, tc.says) {
				t.Errorf("prepare answered %+v, want invalid_domain_xml naming %q", resp, tc.says)
			}
			l, err := bed.Libvirt("b")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Disconnect()
			if _, err := l.DomainLookupByName("hostile"); err == nil {
				t.Errorf("node b's libvirt knows a domain %q after the refusal", "hostile")
			}
		})
	}
}

// prepareAsNodeA speaks to node b's proxy from inside node a, with node a's
// certificate, as node a's ferryd would.
func prepareAsNodeA(t *testing.T, req peer.ControlRequest) peer.ControlResponse {
	t.Helper()
	dir := filepath.Join(bed.Dir(), "tls", "a")
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	raw := dialInNetns(t, bed.FerrydPID("a"), bed.Node("b").ProxyAddr)
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(20 * time.Second))
	c := tls.Client(raw, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: testbed.PeerName, MinVersion: tls.VersionTLS13})
	hb, err := peer.Header{Kind: peer.KindControl}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(hb); err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		t.Fatal(err)
	}
	var resp peer.ControlResponse
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		t.Fatalf("no answer from node b's proxy: %v", err)
	}
	return resp
}
