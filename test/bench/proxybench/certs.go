package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/ferry-vm/ferry/proxy"
)

// peerName is the DNS name both nodes' certificate carries; Ferry checks it
// on both sides.
const peerName = "ferry"

// tlsFiles names the PEM files writeCerts puts into dir; both nodes share
// one identity, which is all a throughput comparison needs.
func tlsFiles(dir string) proxy.TLSFiles {
	return proxy.TLSFiles{
		Cert:     filepath.Join(dir, "tls.crt"),
		Key:      filepath.Join(dir, "tls.key"),
		CA:       filepath.Join(dir, "ca.crt"),
		PeerName: peerName,
	}
}

// writeCerts issues a throwaway CA and a certificate for peerName that
// serves for both server and client authentication.
func writeCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "proxybench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: peerName}, DNSNames: []string{peerName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	f := tlsFiles(dir)
	for path, block := range map[string]*pem.Block{
		f.CA:   {Type: "CERTIFICATE", Bytes: caDER},
		f.Cert: {Type: "CERTIFICATE", Bytes: der},
		f.Key:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// loadTLS reads writeCerts' files into the certificate and CA pool that the
// KubeVirt-style relay's configurations are built from.
func loadTLS(dir string) (tls.Certificate, *x509.CertPool, error) {
	f := tlsFiles(dir)
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return cert, nil, err
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return cert, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return cert, nil, errors.New("no CA certificate in " + f.CA)
	}
	return cert, pool, nil
}
