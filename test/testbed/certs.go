package testbed

import (
	"path/filepath"

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
func writeCerts(dir string) error {
	ca, err := testpki.NewCA("ferry test bed CA")
	if err != nil {
		return err
	}
	for _, d := range nodeDefs {
		if _, err := ca.Issue(tlsDir(dir, d.name), PeerName, proxy.NodeIdentityURI(PeerName, d.name)); err != nil {
			return err
		}
	}
	return nil
}
