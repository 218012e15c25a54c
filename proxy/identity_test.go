package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferry-vm/ferry/peer"
)

// nodeWithCert starts a node named name whose proxy presents files.
func nodeWithCert(t *testing.T, name string, files TLSFiles) *node {
	t.Helper()
	return startNodeWith(t, Config{TLS: &files, Node: name})
}

func rejectedOf(n *node, reason string) float64 {
	return testutil.ToFloat64(n.p.metrics.Rejected.WithLabelValues(reason))
}

// TestNodeIdentityRecordedBothWays: certificates that name their nodes
// let the target record which node prepared a migration, and the source
// which node answered, over real TLS handshakes.
func TestNodeIdentityRecordedBothWays(t *testing.T) {
	ca := newTestCA(t, "ca")
	src := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	dst := nodeWithCert(t, "b", ca.issueNode(t, t.TempDir(), "b"))
	resp := prepare(t, src, dst, "m1", 0, false)
	if resp.PeerNode != "b" {
		t.Fatalf("the source heard the prepare from node %q, want b", resp.PeerNode)
	}
	reg := dst.p.Registered()
	if len(reg) != 1 || reg[0].PeerNode != "a" {
		t.Fatalf("the target recorded %+v, want one migration prepared by node a", reg)
	}
	if got := dst.in.prepared[0].PeerNode; got != "a" {
		t.Fatalf("libvirt's side was told peer node %q, want a", got)
	}
	if fin := finish(t, src, dst, "m1", true); fin.PeerNode != "b" {
		t.Fatalf("finish answered by node %q, want b", fin.PeerNode)
	}
}

// TestNodeIdentityOptional: certificates that name no node work as before
// when no node requires it, and nothing is recorded.
func TestNodeIdentityOptional(t *testing.T) {
	ca := newTestCA(t, "ca")
	src := startNode(t, ptr(ca.issue(t, t.TempDir(), "ferry")))
	dst := nodeWithCert(t, "b", ca.issueNode(t, t.TempDir(), "b"))
	resp := prepare(t, src, dst, "m1", 0, false)
	if reg := dst.p.Registered(); len(reg) != 1 || reg[0].PeerNode != "" {
		t.Fatalf("registered %+v, want no peer node", reg)
	}
	if resp.PeerNode != "b" {
		t.Fatalf("source heard node %q, want b", resp.PeerNode)
	}
	finish(t, src, dst, "m1", true)
}

// TestNodeIdentityRequired: a node that requires identities refuses a
// peer's control request whose certificate names no node, before anything
// of it is looked at, counts and words it without local paths; as a
// source it refuses a target whose certificate names none.
func TestNodeIdentityRequired(t *testing.T) {
	ca := newTestCA(t, "ca")
	anon := startNode(t, ptr(ca.issue(t, t.TempDir(), "ferry")))
	reqFiles := ca.issueNode(t, t.TempDir(), "b")
	reqFiles.RequireNodeIdentity = true
	dst := nodeWithCert(t, "b", reqFiles)

	for _, req := range []peer.ControlRequest{
		{Op: peer.OpPrepare, Migration: "m1", Domain: "vm", XML: testXML},
		{Op: peer.OpFinish, Migration: "m1", Domain: "vm"},
		{Op: "libvirt", Migration: "m1", Domain: "vm"},
	} {
		_, err := anon.p.Control(context.Background(), dst.addr, req)
		var ce *peer.ControlError
		if !errors.As(err, &ce) || ce.Reason != reasonNoIdentity {
			t.Fatalf("%s from a certificate naming no node: %v, want %s", req.Op, err, reasonNoIdentity)
		}
		if strings.Contains(ce.Msg, dst.dir) {
			t.Fatalf("the refusal names the socket dir: %s", ce.Msg)
		}
	}
	if n := rejectedOf(dst, reasonNoIdentity); n != 3 {
		t.Fatalf("ferry_proxy_rejected_total{reason=%q} = %v, want 3", reasonNoIdentity, n)
	}
	if len(dst.in.prepared) != 0 || len(dst.p.Registered()) != 0 {
		t.Fatalf("a refused prepare reached libvirt's side: %+v", dst.in.prepared)
	}

	named := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	prepare(t, named, dst, "m2", 0, false)
	finish(t, named, dst, "m2", true)

	// As a source: a target whose certificate names no node is not
	// spoken to, so nothing is prepared there.
	srcFiles := ca.issueNode(t, t.TempDir(), "a")
	srcFiles.RequireNodeIdentity = true
	src := nodeWithCert(t, "a", srcFiles)
	anonTarget := startNode(t, ptr(ca.issue(t, t.TempDir(), "ferry")))
	if _, err := src.p.Control(context.Background(), anonTarget.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m3", Domain: "vm", XML: testXML}); err == nil || !strings.Contains(err.Error(), "name their node") {
		t.Fatalf("prepare on a target naming no node: %v", err)
	}
	if len(anonTarget.in.prepared) != 0 {
		t.Fatal("the source sent its prepare to a target whose certificate names no node")
	}
}

// TestNodeIdentityMalformed: a certificate that names two nodes, or one
// badly, is refused as such; URI SANs of other trust domains or paths are
// not identities at all.
func TestNodeIdentityMalformed(t *testing.T) {
	ca := newTestCA(t, "ca")
	dst := nodeWithCert(t, "b", ca.issueNode(t, t.TempDir(), "b"))
	for name, files := range map[string]TLSFiles{
		"two nodes": ca.issueNode(t, t.TempDir(), "a", NodeIdentityURI("ferry", "c")),
		"bad name":  ca.issueNode(t, t.TempDir(), "A_1"),
	} {
		// No proxy starts with such a certificate: a bare TLS client
		// presents it.
		resp := tlsControlAs(t, files, dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m", Domain: "vm", XML: testXML})
		if resp.Reason != reasonInvalidIdentity {
			t.Fatalf("%s: %+v, want %s", name, resp, reasonInvalidIdentity)
		}
	}
	if n := rejectedOf(dst, reasonInvalidIdentity); n != 2 {
		t.Fatalf("invalid_node_identity counted %v times, want 2", n)
	}
	other, _ := url.Parse("spiffe://elsewhere/node/x")
	path, _ := url.Parse("spiffe://ferry/workload/x")
	f, err := ca.ca.Issue(t.TempDir(), "ferry", other, path)
	if err != nil {
		t.Fatal(err)
	}
	src := startNode(t, &TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA, PeerName: "ferry"})
	prepare(t, src, dst, "m4", 0, false)
	if reg := dst.p.Registered(); reg[0].PeerNode != "" {
		t.Fatalf("a URI outside ferry's node identities was read as node %q", reg[0].PeerNode)
	}
}

// TestOwnCertificateMustNameThisNode: a proxy whose certificate names
// another node, or none while identities are required, does not start.
func TestOwnCertificateMustNameThisNode(t *testing.T) {
	ca := newTestCA(t, "ca")
	other := ca.issueNode(t, t.TempDir(), "a")
	if _, err := New(Config{TLS: &other, Node: "b", SocketDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "names node a, but this is node b") {
		t.Fatalf("a certificate of node a on node b: %v", err)
	}
	none := ca.issue(t, t.TempDir(), "ferry")
	none.RequireNodeIdentity = true
	if _, err := New(Config{TLS: &none, Node: "b", SocketDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "spiffe://ferry/node/b") {
		t.Fatalf("a certificate naming no node with identities required: %v", err)
	}
}

// TestStreamsBoundToThePreparingNode: a node of the same CA that learnt a
// migration's id cannot open its streams; the node that prepared it can,
// even with a renewed certificate; without identities the streams are
// bound to the preparing certificate.
func TestStreamsBoundToThePreparingNode(t *testing.T) {
	ca := newTestCA(t, "ca")
	dst := nodeWithCert(t, "b", ca.issueNode(t, t.TempDir(), "b"))
	src := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	intruder := nodeWithCert(t, "c", ca.issueNode(t, t.TempDir(), "c"))
	prepare(t, src, dst, "m1", 0, false)

	_, _, err := intruder.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "m1"})
	var refused *peer.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "not prepared") {
		t.Fatalf("node c opened a stream of node a's migration: %v", err)
	}
	if n := rejectedOf(dst, reasonWrongPeer); n != 1 {
		t.Fatalf("wrong_peer counted %v times, want 1", n)
	}
	renewed := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	c, _, err := renewed.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "m1"})
	if err != nil {
		t.Fatalf("node a with a renewed certificate: %v", err)
	}
	c.Close()
	finish(t, renewed, dst, "m1", true)

	anonA := startNode(t, ptr(ca.issue(t, t.TempDir(), "ferry")))
	anonB := startNode(t, ptr(ca.issue(t, t.TempDir(), "ferry")))
	prepare(t, anonA, dst, "m2", 0, false)
	if _, _, err := anonB.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "m2"}); !errors.As(err, &refused) {
		t.Fatalf("another certificate opened a stream of a migration prepared without identity: %v", err)
	}
	c, _, err = anonA.p.dialPeer(context.Background(), dst.addr, "", peer.Header{Kind: peer.KindMemory, ID: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestSourceStreamsGoOnlyToTheTargetThatPrepared: once bound, a source's
// streams refuse a target proxy whose certificate names another node.
func TestSourceStreamsGoOnlyToTheTargetThatPrepared(t *testing.T) {
	ca := newTestCA(t, "ca")
	src := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	dst := nodeWithCert(t, "b", ca.issueNode(t, t.TempDir(), "b"))
	prepare(t, src, dst, "m1", 0, false)
	if _, _, err := src.p.dialPeer(context.Background(), dst.addr, "node:c", peer.Header{Kind: peer.KindMemory, ID: "m1"}); err == nil || !strings.Contains(err.Error(), "not the node c") {
		t.Fatalf("a stream bound to node c went to node b: %v", err)
	}
	c, _, err := src.p.dialPeer(context.Background(), dst.addr, "node:b", peer.Header{Kind: peer.KindMemory, ID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func ptr[T any](v T) *T { return &v }

// tlsControlAs sends one control request over TLS with files' certificate,
// as any holder of it could, and returns the answer.
func tlsControlAs(t *testing.T, files TLSFiles, addr string, req peer.ControlRequest) peer.ControlResponse {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "ferry", MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hb, err := peer.Header{Kind: peer.KindControl}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	c.Write(hb)
	if err := json.NewEncoder(c).Encode(req); err != nil {
		t.Fatal(err)
	}
	var resp peer.ControlResponse
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestPodIdentityNamesItsNode: a certificate that names a ferryd pod names
// the node its resolver finds; one it cannot resolve is refused.
func TestPodIdentityNamesItsNode(t *testing.T) {
	ca := newTestCA(t, "ca")
	pods := map[string]string{"ferry-system/ferryd-aaaaa": "a", "ferry-system/ferryd-bbbbb": "b"}
	resolve := func(_ context.Context, ns, pod string) (string, error) {
		if n, ok := pods[ns+"/"+pod]; ok {
			return n, nil
		}
		return "", errors.New("no such ferryd pod")
	}
	podNode := func(name, pod string) *node {
		f, err := ca.ca.Issue(t.TempDir(), "ferry", PodIdentityURI("ferry", "ferry-system", pod))
		if err != nil {
			t.Fatal(err)
		}
		files := TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA, PeerName: "ferry", RequireNodeIdentity: true}
		return startNodeWith(t, Config{TLS: &files, Node: name, Pod: "ferry-system/" + pod, ResolvePod: resolve})
	}
	src, dst := podNode("a", "ferryd-aaaaa"), podNode("b", "ferryd-bbbbb")
	resp := prepare(t, src, dst, "m1", 0, false)
	if resp.PeerNode != "b" {
		t.Fatalf("source heard node %q, want b", resp.PeerNode)
	}
	if reg := dst.p.Registered(); len(reg) != 1 || reg[0].PeerNode != "a" {
		t.Fatalf("target recorded %+v, want node a", reg)
	}
	finish(t, src, dst, "m1", true)

	f, err := ca.ca.Issue(t.TempDir(), "ferry", PodIdentityURI("ferry", "ferry-system", "stranger"))
	if err != nil {
		t.Fatal(err)
	}
	r := tlsControlAs(t, TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA}, dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m2", Domain: "vm", XML: testXML})
	if r.Reason != reasonInvalidIdentity || !strings.Contains(r.Error, "no such ferryd pod") {
		t.Fatalf("a pod nobody knows: %+v, want %s", r, reasonInvalidIdentity)
	}
	if _, err := New(Config{TLS: &TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA, PeerName: "ferry"}, Node: "a", Pod: "ferry-system/ferryd-aaaaa",
		ResolvePod: resolve, SocketDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "but this is pod") {
		t.Fatalf("a certificate of another pod: %v", err)
	}
}

// A finish decides whether the source gives its guest up: it goes only to
// the proxy that answered the prepare, never to another one holding a
// valid certificate at the target's address.
func TestFinishGoesOnlyToTheProxyThatPrepared(t *testing.T) {
	ca := newTestCA(t, "ca")
	src := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	dst := nodeWithCert(t, "b", ca.issueNode(t, t.TempDir(), "b"))
	impostor := nodeWithCert(t, "c", ca.issueNode(t, t.TempDir(), "c"))
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m1", Domain: "vm", XML: testXML})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Owner != "node:b" {
		t.Fatalf("prepare answered by owner %q, want node:b", resp.Owner)
	}
	_, err = src.p.ControlTo(context.Background(), impostor.addr, resp.Owner, peer.ControlRequest{Op: peer.OpFinish, Migration: resp.Migration, Domain: "vm"})
	if err == nil || !strings.Contains(err.Error(), "not the node b") {
		t.Fatalf("finish sent to node c: %v", err)
	}
	if _, err := src.p.ControlTo(context.Background(), dst.addr, resp.Owner, peer.ControlRequest{Op: peer.OpCancel, Migration: resp.Migration, Domain: "vm"}); err != nil {
		t.Fatalf("cancel to the preparing node: %v", err)
	}
}

// Where proxies are named by their pod, a certificate naming a node
// outright (which no API server vouches for) is refused.
func TestIdentityFormPodRefusesNodeCertificates(t *testing.T) {
	ca := newTestCA(t, "ca")
	dstFiles := ca.issueNode(t, t.TempDir(), "b")
	dstFiles.IdentityForm = "pod"
	_, err := New(Config{TLS: &dstFiles, Node: "b", SocketDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "named by their pod") {
		t.Fatalf("a ferryd whose own certificate names its node started under --proxy-tls-identity-form=pod: %v", err)
	}
	dstFiles.IdentityForm = ""
	dst := nodeWithCert(t, "b", dstFiles)
	dst.p.tls.files.IdentityForm = "pod"
	src := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	before := rejectedOf(dst, reasonInvalidIdentity)
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m1", Domain: "vm", XML: testXML}); err == nil {
		t.Fatal("a node-form certificate prepared a migration where proxies are named by pod")
	}
	if rejectedOf(dst, reasonInvalidIdentity) != before+1 {
		t.Fatal("the refusal was not counted as invalid_node_identity")
	}
}

// A peer this node does not take gets its refusal before it has sent its
// request, so it cannot make the node read and decode 4 MiB first (64 such
// connections held 640 MB).
func TestAPeerIsCheckedBeforeItsRequestIsRead(t *testing.T) {
	ca := newTestCA(t, "ca")
	anon := startNode(t, ptr(ca.issue(t, t.TempDir(), "ferry")))
	reqFiles := ca.issueNode(t, t.TempDir(), "b")
	reqFiles.RequireNodeIdentity = true
	dst := nodeWithCert(t, "b", reqFiles)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := anon.p.dialPeer(ctx, dst.addr, "", peer.Header{Kind: peer.KindControl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Half a request, and no more: the answer must not wait for the rest.
	c.Write([]byte(`{"op":"prepare","xml":"`))
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var resp peer.ControlResponse
	if err := json.NewDecoder(c).Decode(&resp); err != nil || resp.Reason != reasonNoIdentity {
		t.Fatalf("answer to a half-sent request from a peer naming no node: %+v %v, want %s at once", resp, err, reasonNoIdentity)
	}
}
