package proxy

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/testpki"
)

// What QEMU would refuse, or what would let a peer outside Ferry's CA in,
// is said before a direct migration starts, naming the file.
func TestQEMUTLSDirectoryIsCheckedAsQEMUReadsIt(t *testing.T) {
	ferry, err := testpki.NewCA("ferry")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM := func(ca *testpki.CA) []byte {
		dir := t.TempDir()
		if err := ca.IssueQEMU(dir); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, qemuCA))
		return b
	}
	roots.AppendCertsFromPEM(caPEM(ferry))
	ip := net.ParseIP("10.77.0.2")
	good := func() string {
		dir := t.TempDir()
		if err := ferry.IssueQEMU(dir, ip); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, host, says string
		spoil            func(dir string)
	}{
		{"issued by Ferry's CA", "10.77.0.2", "", func(string) {}},
		{"no host asked", "", "", func(string) {}},
		{"server does not name the address", "10.77.0.9", "does not name 10.77.0.9", func(string) {}},
		{"client from another CA", "", "client-cert.pem is not one of Ferry's CA", func(dir string) {
			od := t.TempDir()
			if err := other.IssueQEMU(od); err != nil {
				t.Fatal(err)
			}
			copyFile(filepath.Join(od, qemuClientCert), filepath.Join(dir, qemuClientCert))
			copyFile(filepath.Join(od, qemuClientKey), filepath.Join(dir, qemuClientKey))
		}},
		{"key of another certificate", "", "server-cert.pem", func(dir string) {
			copyFile(filepath.Join(dir, qemuClientKey), filepath.Join(dir, qemuServerKey))
		}},
		{"a Ferry peer's certificate", "", "would pass as a Ferry peer", func(dir string) {
			files, err := ferry.Issue(t.TempDir(), "ferry")
			if err != nil {
				t.Fatal(err)
			}
			copyFile(files.Cert, filepath.Join(dir, qemuClientCert))
			copyFile(files.Key, filepath.Join(dir, qemuClientKey))
		}},
		{"critical key usage without encipherment", "", "key encipherment", func(dir string) {
			files, err := ferry.Issue(t.TempDir(), "qemu-client")
			if err != nil {
				t.Fatal(err)
			}
			copyFile(files.Cert, filepath.Join(dir, qemuClientCert))
			copyFile(files.Key, filepath.Join(dir, qemuClientKey))
		}},
		{"QEMU's CA is another", "", "not Ferry's CA", func(dir string) {
			os.WriteFile(filepath.Join(dir, qemuCA), caPEM(other), 0o600)
		}},
		{"QEMU's CAs are Ferry's and another", "", `holds "other"`, func(dir string) {
			os.WriteFile(filepath.Join(dir, qemuCA), append(caPEM(ferry), caPEM(other)...), 0o600)
		}},
		{"no CA file", "", "ca-cert.pem", func(dir string) { os.Remove(filepath.Join(dir, qemuCA)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := good()
			c.spoil(dir)
			err := checkQEMUTLS(dir, c.host, "ferry", roots, time.Now())
			switch {
			case c.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)):
				t.Fatalf("got %v, want an error saying %q", err, c.says)
			}
		})
	}
}
