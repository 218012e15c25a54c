package daemon

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/ferry-vm/ferry/libvirtx"
)

// directTLSDir is where QEMU's migration certificates are, as ferryd sees
// them, for a node on the direct path: qemu.conf says where libvirt
// takes them from and whether the target QEMU checks a source's client
// certificate. Without that check any neighbour could feed a listening
// QEMU a stream, so the direct path is refused.
// libvirtDir is the directory as libvirt names it, in its errors, which
// may differ from dir where ferryd sees the node's files elsewhere.
func directTLSDir(cfg Config) (dir, libvirtDir string, err error) {
	if len(cfg.DirectPeers) == 0 {
		return cfg.QEMUTLSDir, "", nil
	}
	peers := strings.Join(cfg.DirectPeers, ",")
	m, err := libvirtx.ReadMigrateTLS(cfg.QEMUConf)
	if err != nil {
		return "", "", fmt.Errorf("--direct-peers %s: reading libvirt's qemu.conf (--qemu-conf): %w", peers, err)
	}
	if !m.Verify {
		return "", "", fmt.Errorf("--direct-peers %s: %s sets migrate_tls_x509_verify (or default_tls_x509_verify) to 0: a target QEMU would take a migration stream from anyone who reaches it", peers, cfg.QEMUConf)
	}
	return cmp.Or(cfg.QEMUTLSDir, m.Dir), m.Dir, nil
}
