//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/internal/testpki"
	"github.com/ferry-vm/ferry/test/testbed"
)

// The direct path: Ferry runs the protocol, and QEMU's stream goes from
// a's QEMU straight to b's, under QEMU's own TLS with certificates from
// the bed's CA. While it runs, a's QEMU holds its TLS credentials and the
// name it checks b's certificate against, and a TCP connection of its own
// to b's address; the proxy relays none of its bytes. The guest runs on b
// alone, its memory whole.
func TestDirectPathMigratesWithQEMUsTLS(t *testing.T) {
	supported(t, "direct-path", "yes")
	const name = "direct"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	before := verifiedSoFar(t, name)
	// First its dry run: b's libvirt starts its QEMU listening under its
	// TLS, and stops it again.
	r, code := ctlCheck(t, "a", name, "--to", bed.Node("b").ProxyAddr, "--to-node", "b", "--data-path", "direct")
	if d := r.DryRun; d == nil || !d.OK || d.DataPath != "direct" || code != 0 {
		t.Fatalf("the direct path's dry run: %+v, exit status %d", d, code)
	}
	nothingLeftOfADryRun(t, name)
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: 24, DataPath: "direct"})
	bHost, _, _ := net.SplitHostPort(bed.Node("b").ProxyAddr)
	var creds, hostname, conns string
	var early error
	ended := false
	waitFor(t, "a's QEMU migrating under its own TLS, straight to b", time.Minute, func() bool {
		select {
		case early = <-done:
			ended = true
			return true
		default:
		}
		var params map[string]any
		if qemuAnswer("a", name, "query-migrate-parameters", &params) != nil {
			return false
		}
		creds, _ = params["tls-creds"].(string)
		hostname, _ = params["tls-hostname"].(string)
		out, _ := bed.Exec(context.Background(), "a", "ss", "-Htnp", "state", "established", "dst", bHost).Output()
		conns = string(out)
		return creds != "" && strings.Contains(conns, "qemu")
	})
	if ended {
		t.Fatalf("the direct migration ended before a's QEMU was seen migrating under its own TLS: %v", early)
	}
	t.Logf("a's QEMU: tls-creds %q, tls-hostname %q; its connections to b: %s", creds, hostname, strings.TrimSpace(conns))
	// What b's ferryd reads of its QEMU while it receives: QEMU still
	// listens, and the source's connection is open.
	listens, _ := bed.Exec(context.Background(), "b", "ss", "-Htn", "state", "listening", "src", bHost).Output()
	t.Logf("b's listening sockets on its migration address while its QEMU receives: %s", strings.TrimSpace(string(listens)))
	if hostname != bHost {
		t.Errorf("a's QEMU checks b's certificate for %q, not b's address %s", hostname, bHost)
	}
	if err := <-done; err != nil {
		t.Fatalf("the direct migration failed: %v", err)
	}
	j := waitJob(t, "a", name, "Completed", 30*time.Second, drivenCompleted)
	if j.Proxy == nil || j.Proxy.DataPath != "direct" || !strings.HasPrefix(j.Proxy.DirectURI, "tcp://"+bHost+":") {
		t.Fatalf("the job does not say it went direct to b: %+v", j.Proxy)
	}
	if u, err := url.Parse(j.Proxy.DirectURI); err != nil || !strings.Contains(conns, ":"+u.Port()) {
		t.Errorf("a's QEMU was not connected to %s, where b's QEMU listened: %s", j.Proxy.DirectURI, conns)
	}
	if mem := j.Proxy.Bytes["memory"]; mem["toTarget"] != 0 || mem["connections"] != 0 {
		t.Errorf("a's proxy relayed memory of a direct migration: %v", mem)
	}
	onlyOn(t, name, "b", "a")
	memoryIntact(t, name, before)
	assertTruth(t, name, "a", "b", start)
}

// A stranger on the migration network with a certificate from another CA
// reaches b's QEMU while it listens for a direct migration (the source is
// held before Perform): b's QEMU refuses it, in its own words. Whatever
// the migration then does, the guest runs on exactly one node, its memory
// whole.
func TestDirectPathRefusesAPeerWithoutTheRightCertificate(t *testing.T) {
	const name = "direct-stranger"
	withFaults(t, "a", faults.PauseBeforePerform)
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	before := verifiedSoFar(t, name)
	stranger, err := testpki.NewCA("a stranger's CA")
	if err != nil {
		t.Fatal(err)
	}
	sdir := t.TempDir()
	if err := stranger.IssueQEMU(sdir); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(sdir, "client-cert.pem"), filepath.Join(sdir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", DataPath: "direct"})
	var uri string
	waitFor(t, "b's QEMU listening for the direct migration", time.Minute, func() bool {
		j, ok := ferryOn("a").job(name)
		if ok && j.Phase.Finished() {
			t.Fatalf("the direct migration ended before b's QEMU listened: %s", j.FailureReason)
		}
		if ok && j.Proxy != nil {
			uri = j.Proxy.DirectURI
		}
		return uri != ""
	})
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	// b's QEMU listens on b's migration address alone.
	out, _ := bed.Exec(context.Background(), "b", "ss", "-Hltn", "sport = :"+u.Port()).Output()
	if fields := strings.Fields(string(out)); len(fields) < 4 || fields[3] != u.Host {
		t.Errorf("b's QEMU does not listen on %s alone: %q", u.Host, out)
	}
	logPath := filepath.Join(bed.Node("b").Dir, "log", "qemu", name+".log")
	var logBefore int64
	if fi, err := os.Stat(logPath); err == nil {
		logBefore = fi.Size()
	}
	// The stranger dials from inside node a's network, as a neighbour of
	// the source would.
	refusal := strangerHandshake(t, u.Host, cert)
	t.Logf("the stranger's TLS session with b's QEMU: %v", refusal)
	if refusal == nil {
		t.Errorf("b's QEMU took a client certificate from another CA")
	}
	err = <-done
	t.Logf("the migration after the stranger: %v", err)
	qlog, _ := os.ReadFile(logPath)
	if int64(len(qlog)) >= logBefore {
		qlog = qlog[logBefore:]
	}
	t.Logf("b's QEMU log since the stranger:\n%s", qlog)
	if !strings.Contains(string(qlog), "known issuer") {
		t.Errorf("b's QEMU log does not say the stranger's certificate has no known issuer")
	}
	if err == nil {
		onlyOn(t, name, "b", "a")
	} else {
		onlyOn(t, name, "a", "b")
	}
	memoryIntact(t, name, before)
}

// strangerHandshake opens a TLS session with the QEMU at addr from the
// bed's host, presenting cert, and returns how the QEMU ended it: nil if
// it took the session and would read what came next.
func strangerHandshake(t *testing.T, addr string, cert tls.Certificate) error {
	t.Helper()
	c, err := bed.DialNode(context.Background(), "a", addr)
	if err != nil {
		t.Fatalf("dialing b's QEMU at %s from node a: %v", addr, err)
	}
	defer c.Close()
	// Presented whatever CAs QEMU names: Go's client would otherwise
	// leave out a certificate none of them issued, and QEMU would only
	// have refused a stranger with none.
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		return err
	}
	// TLS 1.3 ends the client's handshake before the server has read its
	// certificate: QEMU's refusal is the next read's.
	var b [1]byte
	_, err = tc.Read(b[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil
	}
	return err
}

// b waits 3 s, not 2 minutes, for a direct migration's source to reach
// its QEMU. A direct migration that takes longer still completes: b sees
// the source connected to its QEMU. A source held past the wait before
// its Perform finds its migration dropped: b stopped its QEMU, so a's
// QEMU finds nothing listening, and the guest runs on a alone, whole.
func TestADirectMigrationTheSourceNeverStartsIsDropped(t *testing.T) {
	const name = "direct-late"
	withFerrydArgs(t, "b", "--proxy-first-stream-wait", "3s")
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	if err := <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: 16, DataPath: "direct"}); err != nil {
		t.Fatalf("a direct migration longer than b's wait: %v", err)
	}
	j := waitJob(t, "a", name, "Completed", 30*time.Second, drivenCompleted)
	if took := j.EndTime.Sub(j.StartTime); took < 5*time.Second {
		t.Errorf("the direct migration took %v: too short to show b's 3 s wait passing while QEMU received", took)
	} else {
		t.Logf("the direct migration took %.1fs against b's 3 s wait", took.Seconds())
	}
	endsWholeOn(t, name, "b", "a", before, start)

	if err := <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "b", To: "a", Via: "ferry"}); err != nil {
		t.Fatalf("the migration back to a: %v", err)
	}
	withFaults(t, "a", faults.PauseBeforePerform)
	before = verifiedSoFar(t, name)
	start = time.Now()
	err := <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", DataPath: "direct"})
	if err == nil {
		t.Fatal("a direct migration b dropped before its Perform completed")
	}
	t.Logf("the direct migration held past b's wait: %v", err)
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("a's QEMU did not find b's stopped: %v", err)
	}
	endsWholeOn(t, name, "a", "b", before, start)
}
