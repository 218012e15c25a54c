package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The direct path takes QEMU's certificates from where libvirt does, and
// is refused where a target QEMU would not check a source's.
func TestDirectPathReadsLibvirtsQEMUConf(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "qemu.conf")
	cfg := Config{DirectPeers: []string{"b"}, QEMUConf: conf}
	os.WriteFile(conf, []byte("migrate_tls_x509_cert_dir = \"/srv/mig\"\n"), 0o600)
	if dir, _, err := directTLSDir(cfg); err != nil || dir != "/srv/mig" {
		t.Fatalf("%q, %v; want qemu.conf's directory", dir, err)
	}
	cfg.QEMUTLSDir = "/host/srv/mig"
	if dir, lv, err := directTLSDir(cfg); err != nil || dir != "/host/srv/mig" || lv != "/srv/mig" {
		t.Fatalf("%q (libvirt's %q), %v; want the directory as ferryd sees it, and as libvirt names it", dir, lv, err)
	}
	os.WriteFile(conf, []byte("migrate_tls_x509_cert_dir = \"/srv/mig\"\nmigrate_tls_x509_verify = 0\n"), 0o600)
	if _, _, err := directTLSDir(cfg); err == nil || !strings.Contains(err.Error(), "from anyone") {
		t.Fatalf("verify off: %v", err)
	}
	cfg.QEMUConf = filepath.Join(t.TempDir(), "none.conf")
	if _, _, err := directTLSDir(cfg); err == nil || !strings.Contains(err.Error(), "--qemu-conf") {
		t.Fatalf("no qemu.conf: %v", err)
	}
	if dir, _, err := directTLSDir(Config{QEMUConf: cfg.QEMUConf}); err != nil || dir != "" {
		t.Fatalf("no direct peers: %q, %v; want nothing read", dir, err)
	}
}
