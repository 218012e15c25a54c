package proxy

import (
	"context"
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
//
// An issuer that knows pods but not nodes (cert-manager's CSI driver
// templates only the pod's name, namespace, uid and service account) names
// the ferryd pod instead, spiffe://<peer name>/ns/<namespace>/pod/<pod>;
// the node is then the one the API server says the pod runs on
// (Config.ResolvePod).
const (
	nodeIdentityPath = "/node/"
	podIdentityPath  = "/ns/"
)

// NodeIdentityURI is the URI SAN that names node in a proxy certificate
// for peers that check peerName.
func NodeIdentityURI(peerName, node string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: peerName, Path: nodeIdentityPath + node}
}

// PodIdentityURI is the URI SAN that names a ferryd pod.
func PodIdentityURI(peerName, namespace, pod string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: peerName, Path: podIdentityPath + namespace + "/pod/" + pod}
}

// dnsSubdomain is a Kubernetes node or pod name (DNS-1123 subdomain); a
// namespace is a label, which it also matches.
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validName(s string) bool { return len(s) <= 253 && dnsSubdomain.MatchString(s) }

// certIdentity is what a certificate names: a node, or a pod.
type certIdentity struct {
	Node, Namespace, Pod string
}

func (c certIdentity) none() bool { return c == certIdentity{} }

func (c certIdentity) String() string {
	if c.Pod != "" {
		return "pod " + c.Namespace + "/" + c.Pod
	}
	return "node " + c.Node
}

// identityOfCert is what a certificate names, or nothing. A certificate
// that names two, or names one badly, is an error: it says nothing
// trustworthy about who holds it.
func identityOfCert(cert *x509.Certificate, peerName string) (certIdentity, error) {
	var id certIdentity
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" || u.Host != peerName {
			continue
		}
		var got certIdentity
		switch {
		case strings.HasPrefix(u.Path, nodeIdentityPath):
			got.Node = strings.TrimPrefix(u.Path, nodeIdentityPath)
			if !validName(got.Node) {
				return certIdentity{}, fmt.Errorf("certificate names a node badly (%q): a node name is a DNS-1123 subdomain", u.String())
			}
		case strings.HasPrefix(u.Path, podIdentityPath):
			ns, pod, ok := strings.Cut(strings.TrimPrefix(u.Path, podIdentityPath), "/pod/")
			if !ok || !validName(ns) || !validName(pod) || strings.Contains(ns, ".") {
				return certIdentity{}, fmt.Errorf("certificate names a pod badly (%q): want spiffe://%s/ns/NAMESPACE/pod/POD", u.String(), peerName)
			}
			got.Namespace, got.Pod = ns, pod
		default:
			continue
		}
		if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return certIdentity{}, fmt.Errorf("certificate names %s with a query, fragment or user (%q)", got, u.String())
		}
		if !id.none() && id != got {
			return certIdentity{}, fmt.Errorf("certificate names both %s and %s", id, got)
		}
		id = got
	}
	return id, nil
}

// Peer is who is at the other end of a connection between proxies.
type Peer struct {
	// Node is the node the peer's certificate names, directly or through
	// its pod, or "".
	Node string
	// Pod is the ferryd pod the certificate names, namespace/name, if it
	// names one.
	Pod string
	// Cert is the SHA-256 of the peer's certificate, or "" without TLS.
	Cert string
	// Plain, for a peer seen without TLS on this node's proxy port, is
	// its address (see plainPeer); "" otherwise.
	Plain string
}

// owner is what binds a prepared migration to the peer that prepared it:
// its node when its certificate names one, which a renewed certificate
// keeps; else the certificate itself; without TLS, its address.
func (p Peer) owner() string {
	switch {
	case p.Node != "":
		return NodeOwner(p.Node)
	case p.Cert != "":
		return "cert:" + p.Cert
	case p.Plain != "":
		return "plain:" + p.Plain
	}
	return ""
}

// plainPeer is a peer that reached the proxy port over plain TCP, known
// by the one thing that shows: its address. A migration it prepared is
// finished, cancelled and streamed only from there: a target's ids show
// in its /proc/net/unix, and anyone on the target node could otherwise
// cancel one, or feed its QEMU, by the id. On the source node, which
// shares the address, no socket is named by the target's id (see
// OpenSource).
func (p *Proxy) plainPeer(who Peer, raw net.Conn) Peer {
	if p.tls != nil {
		return who
	}
	who.Plain = remoteAddr(raw).String()
	return who
}

// String names the peer for logs and refusals.
func (p Peer) String() string {
	switch {
	case p.Pod != "":
		return "node " + p.Node + " (pod " + p.Pod + ")"
	case p.Node != "":
		return "node " + p.Node
	}
	return "a peer whose certificate names no node"
}

// peerOf reads the peer's certificate of a TLS connection; a plain one has
// no Peer. A pod is looked up to find its node.
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
	who := Peer{Cert: hex.EncodeToString(sum[:])}
	id, err := identityOfCert(certs[0], p.tls.files.PeerName)
	if err == nil {
		err = p.checkForm(id)
	}
	if err != nil || id.Pod == "" {
		who.Node = id.Node
		return who, err
	}
	who.Pod = id.Namespace + "/" + id.Pod
	if p.cfg.ResolvePod == nil {
		return who, fmt.Errorf("certificate names %s, and this node has no Kubernetes API to find its node", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.HeaderTimeout)
	defer cancel()
	node, err := p.cfg.ResolvePod(ctx, id.Namespace, id.Pod)
	if err != nil {
		return who, fmt.Errorf("certificate names %s: %w", id, err)
	}
	if !validName(node) {
		return who, fmt.Errorf("certificate names %s, which runs on no valid node (%q)", id, node)
	}
	who.Node = node
	return who, nil
}

// checkForm refuses the identity form this cluster does not use.
func (p *Proxy) checkForm(id certIdentity) error {
	switch form := p.tls.files.IdentityForm; {
	case form == "pod" && id.Node != "" && id.Pod == "":
		return fmt.Errorf("certificate names %s outright, but proxies here are named by their pod (--proxy-tls-identity-form=pod)", id)
	case form == "node" && id.Pod != "":
		return fmt.Errorf("certificate names %s, but proxies here are named by their node (--proxy-tls-identity-form=node)", id)
	}
	return nil
}

// checkOwnIdentity: this node's certificate must name this node (or this
// pod), if it names any, and must name one when peers' certificates must.
func (p *Proxy) checkOwnIdentity() error {
	cert, _ := p.tls.current()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("proxy TLS certificate %s: %w", p.tls.files.Cert, err)
	}
	id, err := identityOfCert(leaf, p.tls.files.PeerName)
	if err == nil {
		err = p.checkForm(id)
	}
	switch {
	case err != nil:
		return fmt.Errorf("proxy TLS certificate %s: %w", p.tls.files.Cert, err)
	case id.none() && p.tls.files.RequireNodeIdentity:
		return fmt.Errorf("proxy TLS certificate %s names no node, and peers' certificates must (--proxy-tls-require-node-identity): issue it with the URI SAN %s",
			p.tls.files.Cert, NodeIdentityURI(p.tls.files.PeerName, p.cfg.Node))
	case id.Node != "" && id.Node != p.cfg.Node:
		return fmt.Errorf("proxy TLS certificate %s names node %s, but this is node %s: peers would record the wrong node", p.tls.files.Cert, id.Node, p.cfg.Node)
	case id.Pod != "" && id.Namespace+"/"+id.Pod != p.cfg.Pod:
		return fmt.Errorf("proxy TLS certificate %s names %s, but this is pod %q (POD_NAMESPACE/POD_NAME): peers would record the wrong node", p.tls.files.Cert, id, p.cfg.Pod)
	case id.Pod != "" && p.cfg.ResolvePod == nil:
		return fmt.Errorf("proxy TLS certificate %s names %s: finding peers' nodes from their pods needs the Kubernetes API", p.tls.files.Cert, id)
	}
	if !id.none() {
		p.log.Info("proxy certificate names this node", zap.String("identity", id.String()))
	}
	return nil
}

// checkPeer is peerOf with this node's policy: a required identity that is
// missing is refused with its reason.
func (p *Proxy) checkPeer(c net.Conn) (Peer, string, error) {
	who, err := p.peerOf(c)
	switch {
	case err != nil:
		return who, reasonInvalidIdentity, err
	case p.tls != nil && p.tls.files.RequireNodeIdentity && who.Node == "":
		return who, reasonNoIdentity, fmt.Errorf("this node requires peers' certificates to name their node (a URI SAN %s)", NodeIdentityURI(p.tls.files.PeerName, "NODE"))
	}
	return who, "", nil
}

// ownerMatches says whether what a migration was bound to (have) is the
// peer asking (want). A record an earlier ferryd made over plain TCP
// bound it to nothing: any plain peer matches it, as it did then.
func ownerMatches(have, want string) bool {
	return have == want || have == "" && strings.HasPrefix(want, "plain:")
}
