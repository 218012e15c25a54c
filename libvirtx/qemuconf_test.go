package libvirtx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMigrateTLSIsReadAsLibvirtReadsIt(t *testing.T) {
	for name, c := range map[string]struct {
		conf, dir string
		verify    bool
		err       string
	}{
		"migration's own":  {"stdio_handler = \"file\"\nmigrate_tls_x509_cert_dir = \"/srv/mig\" # ours\nmigrate_tls_x509_verify = 1\n", "/srv/mig", true, ""},
		"the default's":    {"default_tls_x509_cert_dir = \"/srv/all\"\n", "/srv/all", true, ""},
		"nothing set":      {"# migrate_tls_x509_cert_dir = \"/x\"\n", defaultTLSDir, true, ""},
		"verify inherited": {"default_tls_x509_verify = 0\n", defaultTLSDir, false, ""},
		"verify its own":   {"default_tls_x509_verify = 0\nmigrate_tls_x509_verify = 1\n", defaultTLSDir, true, ""},
		"not a number":     {"migrate_tls_x509_verify = yes\n", "", false, "not a number"},
		"open quote":       {"migrate_tls_x509_cert_dir = \"/srv\n", "", false, "one-line quoted"},
		"first one counts": {"migrate_tls_x509_verify = 0\nmigrate_tls_x509_verify = 1\n", defaultTLSDir, false, ""},
		"single quotes":    {"migrate_tls_x509_cert_dir = '/srv/q'\n", "/srv/q", true, ""},
		"two on a line":    {"migrate_tls_x509_verify = 1; migrate_tls_x509_verify = 0\n", "", false, "more follows"},
		"triple quotes":    {"migrate_tls_x509_cert_dir = \"\"\"/srv\"\"\"\n", "", false, "one-line quoted"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(migrateTLSDir); err == nil && c.dir == defaultTLSDir {
				c.dir = migrateTLSDir // this host has libvirt's migration directory
			}
			path := filepath.Join(t.TempDir(), "qemu.conf")
			os.WriteFile(path, []byte(c.conf), 0o600)
			m, err := ReadMigrateTLS(path)
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("%+v, %v; want an error saying %q", m, err, c.err)
				}
			case err != nil || m.Dir != c.dir || m.Verify != c.verify:
				t.Fatalf("%+v, %v; want %s, verify %v", m, err, c.dir, c.verify)
			}
		})
	}
}
