package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"

	"github.com/ferry-vm/ferry/internal/testpki"
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
	ca, err := testpki.NewCA("proxybench CA")
	if err != nil {
		return err
	}
	_, err = ca.Issue(dir, peerName)
	return err
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
