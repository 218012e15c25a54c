package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// directIncoming prepares direct migrations as libvirt would: the target
// QEMU's address, with the port libvirt chose.
type directIncoming struct{ *fakeIncoming }

func (d directIncoming) PrepareDirect(ctx context.Context, m peer.IncomingMigration, xml string, cookie []byte) ([]byte, string, error) {
	d.mu.Lock()
	d.prepared = append(d.prepared, m)
	d.mu.Unlock()
	return []byte("prepared:" + m.ID), m.MemoryURI + ":49152", nil
}

// A direct prepare is taken only from a node the target lists, only for
// pre-copy, and only while its QEMU's certificates name the address the
// source reached it at; the answer says where its QEMU listens, and the
// migration is under way for the finish with no stream through the proxy.
func TestDirectPrepareIsTakenOnlyFromListedPeers(t *testing.T) {
	ca := newTestCA(t, "ca")
	qemuDir := t.TempDir()
	if err := ca.ca.IssueQEMU(qemuDir, net.ParseIP("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	in := directIncoming{newFakeIncoming()}
	files := ca.issueNode(t, t.TempDir(), "b")
	dst := startNodeWith(t, Config{TLS: &files, Node: "b", Incoming: in, DirectPeers: []string{"a"}, QEMUTLSDir: qemuDir})
	a := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
	c := nodeWithCert(t, "c", ca.issueNode(t, t.TempDir(), "c"))
	ask := func(src *node, id string, postCopy bool) (peer.ControlResponse, error) {
		return src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: id, Domain: "vm",
			XML: testXML, Cookie: []byte("begin"), Flags: 1, PostCopy: postCopy, Direct: true})
	}
	resp, err := ask(a, "m1", false)
	if err != nil || resp.URI != "tcp://127.0.0.1:49152" {
		t.Fatalf("a listed peer's direct prepare: %+v, %v", resp, err)
	}
	m := in.prepared[0]
	if !m.Direct || m.ListenAddress != "127.0.0.1" || m.MemoryURI != "tcp://127.0.0.1" || m.PeerNode != "a" {
		t.Fatalf("prepared %+v", m)
	}
	if fin := finish(t, a, dst, "m1", false); fin.Reason != "" {
		t.Fatalf("the finish of a direct migration that relayed nothing: %+v", fin)
	}
	for _, c := range []struct {
		name     string
		src      *node
		postCopy bool
		says     string
	}{
		{"a node not listed", c, false, "--direct-peers"},
		{"post-copy", a, true, "pre-copy memory only"},
	} {
		if _, err := ask(c.src, "m-"+c.src.p.cfg.Node, c.postCopy); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want a refusal saying %q", c.name, err, c.says)
		}
	}
	// Certificates that do not name where the source reached this node.
	if err := ca.ca.IssueQEMU(qemuDir, net.ParseIP("10.0.0.9")); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(a, "m3", false); err == nil || !strings.Contains(err.Error(), "certificates are not usable") {
		t.Errorf("a server certificate for another address: %v", err)
	}
	if n, m := rejectedOf(dst, reasonDirectNotAllowed), rejectedOf(dst, reasonDirectUnavailable); n != 2 || m != 1 {
		t.Errorf("direct_not_allowed counted %v times, direct_unavailable %v; want 2 and 1", n, m)
	}
	if len(in.prepared) != 1 {
		t.Errorf("libvirt prepared %d migrations, want the one taken", len(in.prepared))
	}
}

// A direct migration whose Perform runs is in flight with no stream here:
// a shutdown waits for it, and past its grace cuts it by aborting it;
// one asked to start once the shutdown began is not let out.
func TestShutdownWaitsForAndCutsADirectPerform(t *testing.T) {
	n := startNode(t, nil)
	src, err := n.p.OpenSource("m-direct", "10.0.0.2:9475", nil, os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	cut := make(chan struct{})
	if !src.PerformDirect(func() { close(cut) }) {
		t.Fatal("a direct Perform was not let out before any shutdown")
	}
	if f := n.p.inFlight(); len(f) != 1 || f[0].id != "m-direct" {
		t.Fatalf("in flight: %+v, want the direct migration", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = n.p.Shutdown(ctx)
	select {
	case <-cut:
	default:
		t.Fatal("the shutdown did not cut the direct migration past its grace")
	}
	if err == nil || !strings.Contains(err.Error(), "m-direct") {
		t.Fatalf("shutdown: %v, want the direct migration reported cut", err)
	}
	late, err := n.p.OpenSource("m-late", "10.0.0.2:9475", nil, os.Getpid(), 0)
	if err == nil && late.PerformDirect(func() {}) {
		t.Fatal("a direct Perform was let out during the shutdown")
	}
}

// listeningIncoming prepares direct migrations with a real socket
// standing in for the target QEMU's listener.
type listeningIncoming struct {
	*fakeIncoming
	ln net.Listener
}

func (d listeningIncoming) PrepareDirect(ctx context.Context, m peer.IncomingMigration, xml string, cookie []byte) ([]byte, string, error) {
	d.mu.Lock()
	d.prepared = append(d.prepared, m)
	d.mu.Unlock()
	return []byte("prepared:" + m.ID), "tcp://" + d.ln.Addr().String(), nil
}

// A direct migration whose source never connects to the target QEMU is
// dropped after the first-stream wait, as a relayed one with no stream
// is, and so is one only a stranger reached and left; one the source
// connected to is left to its time, even after its connection closes
// (QEMU listens to the end), and so is one whose QEMU ended. A
// connection from another address keeps it while it lasts: it may be
// the source's, from another address of its node.
func TestADirectPrepareTheSourceNeverReachesIsDropped(t *testing.T) {
	ca := newTestCA(t, "ca")
	const wait = 300 * time.Millisecond
	stranger := func(t *testing.T, qemu net.Listener) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		c, err := d.Dial("tcp", qemu.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	source := func(t *testing.T, qemu net.Listener) net.Conn {
		c, err := net.Dial("tcp", qemu.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, c := range []struct {
		name, host string
		reach      func(t *testing.T, qemu net.Listener)
		dropped    bool
	}{
		{"nobody connects", "127.0.0.1", nil, true},
		{"nobody connects, IPv6", "::1", nil, true},
		{"a stranger came and went", "127.0.0.1", func(t *testing.T, qemu net.Listener) {
			stranger(t, qemu).Close()
		}, true},
		{"another address stays connected", "127.0.0.1", func(t *testing.T, qemu net.Listener) {
			stranger(t, qemu)
		}, false},
		{"another address leaves after a look", "127.0.0.1", func(t *testing.T, qemu net.Listener) {
			c := stranger(t, qemu)
			time.AfterFunc(wait+wait/2, func() { c.Close() })
		}, true},
		{"the source connected, and closed after a look", "127.0.0.1", func(t *testing.T, qemu net.Listener) {
			c := source(t, qemu)
			time.AfterFunc(wait+wait/2, func() { c.Close() })
		}, false},
		{"QEMU ended", "127.0.0.1", func(t *testing.T, qemu net.Listener) {
			qemu.Close()
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			qemuDir := t.TempDir()
			if err := ca.ca.IssueQEMU(qemuDir, net.ParseIP(c.host)); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(c.host, "0"))
			if err != nil {
				t.Skipf("no %s here: %v", c.host, err)
			}
			defer ln.Close()
			// As QEMU does: take each connection, read it to its end,
			// close it.
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { io.Copy(io.Discard, conn); conn.Close() }()
				}
			}()
			in := listeningIncoming{newFakeIncoming(), ln}
			dst := startNodeWith(t, Config{Listen: net.JoinHostPort(c.host, "0"), TLS: ptr(ca.issueNode(t, t.TempDir(), "b")), Node: "b", Incoming: in,
				DirectPeers: []string{"a"}, QEMUTLSDir: qemuDir, FirstStreamWait: wait})
			a := nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))
			resp, err := a.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m1", Domain: "vm",
				XML: testXML, Cookie: []byte("begin"), Flags: 1, Direct: true})
			if err != nil || resp.URI != "tcp://"+ln.Addr().String() {
				t.Fatalf("direct prepare: %+v, %v", resp, err)
			}
			if c.reach != nil {
				c.reach(t, ln)
			}
			time.Sleep(4 * wait)
			in.mu.Lock()
			dropped := slices.Contains(in.cancelled, "m1")
			in.mu.Unlock()
			if dropped != c.dropped {
				t.Errorf("libvirt told to cancel: %v, want %v", dropped, c.dropped)
			}
		})
	}
}

// A dry run of the direct path is taken as a migration's prepare is,
// from listed peers only, and its target QEMU is stopped again.
func TestADirectDryRunPreparesAndStopsTheTargetQEMU(t *testing.T) {
	ca := newTestCA(t, "ca")
	qemuDir := t.TempDir()
	if err := ca.ca.IssueQEMU(qemuDir, net.ParseIP("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	in := directIncoming{newFakeIncoming()}
	dst := startNodeWith(t, Config{TLS: ptr(ca.issueNode(t, t.TempDir(), "b")), Node: "b", Incoming: in, DirectPeers: []string{"a"}, QEMUTLSDir: qemuDir})
	ask := func(src *node) (peer.ControlResponse, error) {
		return src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: "m-" + src.p.cfg.Node, Domain: "vm",
			XML: testXML, Cookie: []byte("begin"), Flags: 1, Direct: true, DryRun: true})
	}
	if resp, err := ask(nodeWithCert(t, "a", ca.issueNode(t, t.TempDir(), "a"))); err != nil || resp.Error != "" {
		t.Fatalf("a listed peer's direct dry run: %+v, %v", resp, err)
	}
	if len(in.prepared) != 1 || !in.prepared[0].Direct || !in.prepared[0].DryRun || !slices.Contains(in.cancelled, "m-a") {
		t.Fatalf("prepared %+v, cancelled %v: want one direct dry run, stopped again", in.prepared, in.cancelled)
	}
	_, err := ask(nodeWithCert(t, "c", ca.issueNode(t, t.TempDir(), "c")))
	var ce *peer.ControlError
	if !errors.As(err, &ce) || ce.Reason != reasonDirectNotAllowed || !strings.Contains(err.Error(), "--direct-peers") {
		t.Errorf("a node not listed: %v, want refused as not in --direct-peers", err)
	}
	if len(in.prepared) != 1 {
		t.Errorf("libvirt prepared %d migrations, want only the listed peer's", len(in.prepared))
	}
	if n := rejectedOf(dst, reasonDirectNotAllowed); n != 1 {
		t.Errorf("direct_not_allowed counted %v times for the unlisted peer's dry run, want 1", n)
	}
}
