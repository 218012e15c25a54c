package proxy

import (
	"net/url"
	"testing"

	"github.com/ferry-vm/ferry/internal/testpki"
)

// testCA issues certificates for the tests; each test CA is independent,
// so a certificate from one is foreign to another.
type testCA struct{ ca *testpki.CA }

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	ca, err := testpki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{ca}
}

// issue writes a certificate for dnsName plus key and CA files into dir.
func (c *testCA) issue(t *testing.T, dir, dnsName string) TLSFiles {
	t.Helper()
	f, err := c.ca.Issue(dir, dnsName)
	if err != nil {
		t.Fatal(err)
	}
	return TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA, PeerName: "ferry"}
}

// issueNode is issue for a certificate that names node, as the URI SAN
// NodeIdentityURI builds, plus any extra URI SANs.
func (c *testCA) issueNode(t *testing.T, dir, node string, extra ...*url.URL) TLSFiles {
	t.Helper()
	f, err := c.ca.Issue(dir, "ferry", append([]*url.URL{NodeIdentityURI("ferry", node)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA, PeerName: "ferry"}
}
