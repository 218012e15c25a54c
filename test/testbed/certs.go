package testbed

import (
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/ferry-vm/ferry/internal/testpki"
	"github.com/ferry-vm/ferry/proxy"
)

// PeerName is the DNS name in every node's proxy certificate.
const PeerName = "ferry"

// tlsDir holds a node's proxy certificate, key and the bed's CA.
func tlsDir(dir, node string) string { return filepath.Join(dir, "tls", node) }

// writeCerts issues a fresh CA and one certificate per node, as a cluster's
// certificate manager would, for the proxies' mutual TLS. Each names its
// node, so each side of a migration records the other.
func writeCerts(dir string) (*testpki.CA, error) {
	ca, err := testpki.NewCA("ferry test bed CA")
	if err != nil {
		return nil, err
	}
	for _, d := range nodeDefs {
		if _, err := ca.Issue(tlsDir(dir, d.name), PeerName, proxy.NodeIdentityURI(PeerName, d.name)); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

// QEMUTLSDirInNode is where each node's libvirt keeps QEMU's own migration
// certificates (its qemu.conf's migrate_tls_x509_cert_dir), as the node
// sees it: /etc/pki/libvirt-migrate on a stock host.
const QEMUTLSDirInNode = "/etc/libvirt/pki/qemu-migrate"

// qemuTLSDir is that directory on the host.
func qemuTLSDir(cfg Config, node string) string {
	return filepath.Join(cfg.Dir, node, "etc", "pki", "qemu-migrate")
}

// writeQEMUCerts issues the node's QEMU migration certificates from the
// bed's CA, Ferry's identity: the server's names the node's address on
// the migration network. QEMU reads them as libvirt-qemu, so they are
// that user's (the bed prepared the account).
func writeQEMUCerts(cfg Config, ca *testpki.CA, d nodeDef) error {
	dir := qemuTLSDir(cfg, d.name)
	if err := ca.IssueQEMU(dir, net.ParseIP(d.ip)); err != nil {
		return err
	}
	u, err := user.Lookup("libvirt-qemu")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Chown(filepath.Join(dir, e.Name()), uid, gid); err != nil {
			return err
		}
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	// QEMU passes through the directory above on its way.
	return os.Chmod(filepath.Dir(dir), 0o755)
}
