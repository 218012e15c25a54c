package proxy

import (
	"context"
	"crypto/tls"
	"os"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// TestRotatedCertificatesTakeEffectWithoutRestart replaces the target's
// certificate files (a new CA for both nodes, as after a CA rotation) and
// checks the next connection uses them, with no restart.
func TestRotatedCertificatesTakeEffectWithoutRestart(t *testing.T) {
	old := newTestCA(t, "old-ca")
	srcDir, dstDir := t.TempDir(), t.TempDir()
	srcFiles, dstFiles := old.issue(t, srcDir, "ferry"), old.issue(t, dstDir, "ferry")
	src := startNode(t, &srcFiles)
	dst := startNode(t, &dstFiles)
	prepare(t, src, dst, "before", 0, false)

	fresh := newTestCA(t, "new-ca")
	// mtimes have whole-second granularity on some filesystems.
	time.Sleep(1100 * time.Millisecond)
	fresh.issue(t, srcDir, "ferry")
	fresh.issue(t, dstDir, "ferry")
	time.Sleep(1100 * time.Millisecond) // the sources re-check files at most once a second

	// The source's identity changed since its prepare: the migration is
	// bound to the old one, and only that one may finish it.
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: "before", Domain: "vm"}); err == nil {
		t.Fatal("a finish from a new certificate ended a migration prepared under the old one")
	}
	dst.p.Unregister("before", "test")
	prepare(t, src, dst, "after", 0, false)
	conn, err := tls.Dial("tcp", dst.addr, src.p.tls.clientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	issuer := conn.ConnectionState().PeerCertificates[0].Issuer.CommonName
	if issuer != "new-ca" {
		t.Fatalf("target still presents a certificate from %q after rotation", issuer)
	}

	// A file that stops parsing keeps the last good one in use.
	os.WriteFile(dstFiles.Cert, []byte("not a certificate"), 0o600)
	time.Sleep(1100 * time.Millisecond)
	if _, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpCancel, Migration: "after", Domain: "vm"}); err != nil {
		t.Fatalf("a corrupt certificate file broke the proxy instead of keeping the last good one: %v", err)
	}
}
