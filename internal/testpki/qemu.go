package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"time"
)

// IssueQEMU writes into dir what libvirt's migrate_tls_x509_cert_dir holds
// for QEMU's own migration TLS: this CA as ca-cert.pem, a server pair
// naming ips (the addresses a source's QEMU connects to) and a client
// pair. QEMU refuses a certificate whose critical key usage lacks key
// encipherment, so both carry it beside digital signature. Files are
// mode 0640: QEMU reads them as its own user, through the group the
// caller gives them.
func (ca *CA) IssueQEMU(dir string, ips ...net.IP) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	pairs := []struct {
		name  string
		usage x509.ExtKeyUsage
		ips   []net.IP
	}{{"server", x509.ExtKeyUsageServerAuth, ips}, {"client", x509.ExtKeyUsageClientAuth, nil}}
	for _, p := range pairs {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		now := time.Now()
		tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "ferry qemu " + p.name}, IPAddresses: p.ips,
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{p.usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, p.name+"-cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, p.name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, "ca-cert.pem"), ca.pem)
}

func writeFile(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o640); err != nil {
		return err
	}
	return os.Chmod(path, 0o640)
}
