package proxy

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"go.uber.org/zap"
)

// A proxy certificate names the node it was issued for with a URI SAN
// spiffe://<peer name>/node/<node name>: a URI, so it cannot pass for a
// host name, under the peer name (--proxy-tls-peer-name) as its trust
// domain, so a URI meant for anything else is never read as a node.
const nodeIdentityPath = "/node/"

// NodeIdentityURI is the URI SAN that names node in a proxy certificate
// for peers that check peerName.
func NodeIdentityURI(peerName, node string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: peerName, Path: nodeIdentityPath + node}
}

// nodeName is a Kubernetes node name: a DNS-1123 subdomain.
var nodeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// nodeOfCert is the node a certificate names, or "" if it names none. A
// certificate that names two nodes, or names one badly, is an error: it
// says nothing trustworthy about who holds it.
func nodeOfCert(cert *x509.Certificate, peerName string) (string, error) {
	node := ""
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" || u.Host != peerName || !strings.HasPrefix(u.Path, nodeIdentityPath) {
			continue
		}
		name := strings.TrimPrefix(u.Path, nodeIdentityPath)
		if len(name) > 253 || !nodeName.MatchString(name) || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return "", fmt.Errorf("certificate names a node badly (%q): a node name is a DNS-1123 subdomain", u.String())
		}
		if node != "" && node != name {
			return "", fmt.Errorf("certificate names two nodes, %s and %s", node, name)
		}
		node = name
	}
	return node, nil
}

// Peer is who is at the other end of a connection between proxies.
type Peer struct {
	// Node is what the peer's certificate names, or "".
	Node string
	// Cert is the SHA-256 of the peer's certificate, or "" without TLS.
	Cert string
}

// owner is what binds a prepared migration to the peer that prepared it:
// its node when its certificate names one, which a renewed certificate
// keeps; else the certificate itself; nothing without TLS.
func (p Peer) owner() string {
	switch {
	case p.Node != "":
		return "node:" + p.Node
	case p.Cert != "":
		return "cert:" + p.Cert
	}
	return ""
}

// String names the peer for logs and refusals.
func (p Peer) String() string {
	if p.Node != "" {
		return "node " + p.Node
	}
	return "a peer whose certificate names no node"
}

// peerOf reads the peer's certificate of a TLS connection; a plain one has
// no Peer.
func (p *Proxy) peerOf(c net.Conn) (Peer, error) {
	tc, ok := c.(*tls.Conn)
	if !ok || p.tls == nil {
		return Peer{}, nil
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return Peer{}, nil
	}
	sum := sha256.Sum256(certs[0].Raw)
	peer := Peer{Cert: hex.EncodeToString(sum[:])}
	node, err := nodeOfCert(certs[0], p.tls.files.PeerName)
	peer.Node = node
	return peer, err
}

// checkOwnIdentity: this node's certificate must name this node, if it
// names any, and must name it when peers' certificates must.
func (p *Proxy) checkOwnIdentity() error {
	cert, _ := p.tls.current()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("proxy TLS certificate %s: %w", p.tls.files.Cert, err)
	}
	node, err := nodeOfCert(leaf, p.tls.files.PeerName)
	switch {
	case err != nil:
		return fmt.Errorf("proxy TLS certificate %s: %w", p.tls.files.Cert, err)
	case node == "" && p.tls.files.RequireNodeIdentity:
		return fmt.Errorf("proxy TLS certificate %s names no node, and peers' certificates must (--proxy-tls-require-node-identity): issue it with the URI SAN %s",
			p.tls.files.Cert, NodeIdentityURI(p.tls.files.PeerName, p.cfg.Node))
	case node != "" && node != p.cfg.Node:
		return fmt.Errorf("proxy TLS certificate %s names node %s, but this is node %s: peers would record the wrong node", p.tls.files.Cert, node, p.cfg.Node)
	}
	if node != "" {
		p.log.Info("proxy certificate names this node", zap.String("node", node))
	}
	return nil
}

// checkPeer is peerOf with this node's policy: a required identity that is
// missing is refused with its reason.
func (p *Proxy) checkPeer(c net.Conn) (Peer, string, error) {
	peer, err := p.peerOf(c)
	switch {
	case err != nil:
		return peer, reasonInvalidIdentity, err
	case p.tls != nil && p.tls.files.RequireNodeIdentity && peer.Node == "":
		return peer, reasonNoIdentity, fmt.Errorf("this node requires peers' certificates to name their node (a URI SAN %s)", NodeIdentityURI(p.tls.files.PeerName, "NODE"))
	}
	return peer, "", nil
}
