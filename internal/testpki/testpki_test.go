package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

func TestIssuedCertificateVerifiesForTheNameBothWays(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Issue(t.TempDir(), "ferry")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	caPEM, _ := os.ReadFile(f.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "ferry", Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("usage %v: %v", usage, err)
		}
	}
	other, _ := NewCA("other CA")
	g, _ := other.Issue(t.TempDir(), "ferry")
	otherPair, _ := tls.LoadX509KeyPair(g.Cert, g.Key)
	otherLeaf, _ := x509.ParseCertificate(otherPair.Certificate[0])
	if _, err := otherLeaf.Verify(x509.VerifyOptions{DNSName: "ferry", Roots: pool}); err == nil {
		t.Error("a certificate from another CA verified")
	}
}
