package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The files QEMU reads from libvirt's migrate_tls_x509_cert_dir for a
// migration under its own TLS (the direct path): the target QEMU serves
// with the server pair and checks the source's client certificate against
// the CA; the source QEMU checks the server's against the same CA.
const (
	qemuCA         = "ca-cert.pem"
	qemuServerCert = "server-cert.pem"
	qemuServerKey  = "server-key.pem"
	qemuClientCert = "client-cert.pem"
	qemuClientKey  = "client-key.pem"
)

// oidKeyUsage is X.509's key usage extension (RFC 5280, 4.2.1.3).
var oidKeyUsage = asn1.ObjectIdentifier{2, 5, 29, 15}

// CheckQEMUTLS reads the directory libvirt gives QEMU for a migration's
// own TLS, as QEMU will, and says what would make it fail: a missing
// file, a key that is not its certificate's, a certificate not issued by
// the CA this proxy's peers are (Ferry's identity), or one QEMU refuses
// (its key usage, its purpose). For the server's, host (an IP address),
// when given, must be named: the source QEMU checks the name it connects
// to. A proxy without TLS has no CA to check against, and no direct path.
func (p *Proxy) CheckQEMUTLS(dir, host string) error {
	if p.tls == nil {
		return errors.New("the direct path needs the proxy's mutual TLS: its CA is what QEMU's certificates must come from")
	}
	_, roots := p.tls.current()
	return checkQEMUTLS(dir, host, p.tls.files.PeerName, roots, time.Now())
}

func checkQEMUTLS(dir, host, peerName string, roots *x509.CertPool, now time.Time) error {
	caPEM, err := os.ReadFile(filepath.Join(dir, qemuCA))
	if err != nil {
		return fmt.Errorf("QEMU's migration TLS directory: %w", err)
	}
	// QEMU trusts the self-signed certificates in ca-cert.pem, and
	// follows the others there as links to them; it refuses a chain that
	// reaches no self-signed root. Each must be Ferry's CA or come from
	// it: any other would let its holders in.
	cas, err := parsePEMCerts(caPEM)
	if err != nil || len(cas) == 0 {
		return fmt.Errorf("QEMU's migration TLS CA %s holds no PEM certificate (%v)", filepath.Join(dir, qemuCA), err)
	}
	qemuRoots, links, all := x509.NewCertPool(), x509.NewCertPool(), x509.NewCertPool()
	for _, c := range cas {
		all.AddCert(c)
		if selfSigned(c) {
			qemuRoots.AddCert(c)
		} else {
			links.AddCert(c)
		}
	}
	for _, c := range cas {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, Intermediates: links, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return fmt.Errorf("QEMU's migration TLS CA %s holds %q, which is not Ferry's CA nor one it issued: QEMU would take certificates from it: %w", filepath.Join(dir, qemuCA), c.Subject.CommonName, err)
		}
	}
	for _, pair := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
	}{{qemuServerCert, qemuServerKey, x509.ExtKeyUsageServerAuth}, {qemuClientCert, qemuClientKey, x509.ExtKeyUsageClientAuth}} {
		certPath := filepath.Join(dir, pair.cert)
		kp, err := tls.LoadX509KeyPair(certPath, filepath.Join(dir, pair.key))
		if err != nil {
			return fmt.Errorf("QEMU's migration TLS pair %s: %w", pair.cert, err)
		}
		leaf := kp.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(kp.Certificate[0]); err != nil {
				return fmt.Errorf("QEMU's migration TLS certificate %s: %w", certPath, err)
			}
		}
		chain := all.Clone()
		for _, der := range kp.Certificate[1:] {
			if c, err := x509.ParseCertificate(der); err == nil {
				chain.AddCert(c)
			}
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: chain, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{pair.usage}}
		if _, err := leaf.Verify(opts); err != nil {
			return fmt.Errorf("QEMU's migration TLS certificate %s is not one of Ferry's CA for %s: %w", certPath, usageName(pair.usage), err)
		}
		opts.Roots = qemuRoots
		if _, err := leaf.Verify(opts); err != nil {
			return fmt.Errorf("QEMU's migration TLS certificate %s does not verify against %s (to a self-signed root there), which QEMU checks peers with: %w", certPath, qemuCA, err)
		}
		if err := notAFerryPeer(leaf, peerName); err != nil {
			return fmt.Errorf("QEMU's migration TLS certificate %s %v: every QEMU of the node reads its key, so any of them could speak to peers' proxies as this node; issue QEMU's certificates without Ferry's peer name or identity", certPath, err)
		}
		if err := qemuTakesKeyUsage(leaf); err != nil {
			return fmt.Errorf("QEMU's migration TLS certificate %s: %w", certPath, err)
		}
		if pair.cert == qemuServerCert && host != "" {
			if err := leaf.VerifyHostname(host); err != nil {
				return fmt.Errorf("QEMU's migration TLS certificate %s does not name %s, the address the source's QEMU connects to: %w", certPath, host, err)
			}
		}
	}
	return nil
}

// notAFerryPeer refuses a certificate a proxy would take from a peer: one
// valid for the peer name, or naming a node or pod as Ferry's identity.
func notAFerryPeer(c *x509.Certificate, peerName string) error {
	if peerName != "" && c.VerifyHostname(peerName) == nil {
		return fmt.Errorf("would pass as a Ferry peer (it is valid for %q)", peerName)
	}
	if id, err := identityOfCert(c, peerName); err == nil && !id.none() {
		return fmt.Errorf("would pass as a Ferry peer (it names %s)", id)
	}
	return nil
}

// qemuTakesKeyUsage applies QEMU's own test of the certificates it is
// given (not of a peer's, which it checks against its CA alone): where
// the key usage extension is critical, as Go and most CAs write it, it
// must allow both signatures and key encipherment, whatever the key type.
func qemuTakesKeyUsage(c *x509.Certificate) error {
	critical := slices.ContainsFunc(c.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(oidKeyUsage) && e.Critical })
	need := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	if critical && c.KeyUsage&need != need {
		return errors.New("its critical key usage lacks digital signature or key encipherment, which QEMU requires of a TLS peer's certificate")
	}
	return nil
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageServerAuth {
		return "server authentication"
	}
	return "client authentication"
}

func parsePEMCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

func selfSigned(c *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignatureFrom(c) == nil
}
