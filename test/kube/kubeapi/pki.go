package kubeapi

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the file paths of the cluster's keys and certificates, and the PEM of what
// clients need.
type pki struct {
	caCert, servingCert, servingKey  string
	saKey, saPub                     string
	caPEM, adminCertPEM, adminKeyPEM []byte
}

// newPKI writes a fresh CA, a serving certificate for 127.0.0.1/localhost, an admin
// client certificate in system:masters and a service-account signing key pair to dir.
// ECDSA P-256 throughout: generating RSA keys would add a visible fraction of a second
// to every Start.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Back-dated so that a clock a little behind on either side does not reject them.
	notBefore := time.Now().Add(-time.Hour)
	notAfter := notBefore.Add(30 * 24 * time.Hour)

	caKey, err := newKey()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "ferry-kubeapi-ca"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, ca, err := sign(caTmpl, caTmpl, caKey, caKey)
	if err != nil {
		return nil, err
	}

	servingKey, err := newKey()
	if err != nil {
		return nil, err
	}
	servingDER, _, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	}, ca, servingKey, caKey)
	if err != nil {
		return nil, err
	}

	adminKey, err := newKey()
	if err != nil {
		return nil, err
	}
	adminDER, _, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "ferry-kubeapi-admin", Organization: []string{"system:masters"}},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, adminKey, caKey)
	if err != nil {
		return nil, err
	}

	saKey, err := newKey()
	if err != nil {
		return nil, err
	}

	p := &pki{
		caCert:       filepath.Join(dir, "ca.crt"),
		servingCert:  filepath.Join(dir, "apiserver.crt"),
		servingKey:   filepath.Join(dir, "apiserver.key"),
		saKey:        filepath.Join(dir, "sa.key"),
		saPub:        filepath.Join(dir, "sa.pub"),
		caPEM:        certPEM(caDER),
		adminCertPEM: certPEM(adminDER),
	}
	if p.adminKeyPEM, err = keyPEM(adminKey); err != nil {
		return nil, err
	}
	servingKeyPEM, err := keyPEM(servingKey)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{
		p.caCert:                        p.caPEM,
		p.servingCert:                   certPEM(servingDER),
		p.servingKey:                    servingKeyPEM,
		p.saKey:                         saKeyPEM,
		p.saPub:                         pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		filepath.Join(dir, "admin.crt"): p.adminCertPEM,
		filepath.Join(dir, "admin.key"): p.adminKeyPEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	return der, cert, err
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
