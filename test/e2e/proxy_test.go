//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// setTLS switches both ferryds' proxies, restoring mutual TLS afterwards.
func setTLS(t *testing.T, on bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.SetProxyTLS(ctx, on); err != nil {
		t.Fatal(err)
	}
	if !on {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := bed.SetProxyTLS(ctx, true); err != nil {
				t.Errorf("restoring TLS: %v", err)
			}
		})
	}
}

func TestMigrationsThroughFerrysProxy(t *testing.T) {
	supported(t, "driven-precopy", "yes")
	for _, tls := range []bool{true, false} {
		name := "mtls"
		if !tls {
			name = "plain"
		}
		t.Run(name, func(t *testing.T) {
			setTLS(t, tls)
			guest(t, testbed.GuestSpec{Name: "px-" + name, MemoryMiB: 512, DirtyMiB: 256, DirtyRateMiBs: 32})
			g := "px-" + name
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()

			// Pre-copy with four multifd connections, a -> b.
			start := time.Now()
			if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: g, From: "a", To: "b", Parallel: 4}); err != nil {
				t.Fatalf("pre-copy with --parallel 4: %v", err)
			}
			src := waitJob(t, "a", g, "Completed", 15*time.Second, drivenCompleted)
			checkProxied(t, src, tls, 4)
			sent := src.Proxy.Bytes["memory"]["toTarget"]
			diff := math.Abs(float64(sent)-float64(src.DataProcessedBytes)) / float64(src.DataProcessedBytes)
			t.Logf("pre-copy: proxy relayed %d MiB on memory in %d connections; libvirt reports %d MiB processed (%.1f%% apart)",
				sent>>20, src.Proxy.Bytes["memory"]["connections"], src.DataProcessedBytes>>20, 100*diff)
			if diff > 0.05 {
				t.Errorf("proxy byte count %d is %.1f%% away from libvirt's data processed %d", sent, 100*diff, src.DataProcessedBytes)
			}
			if st, _ := domainState(t, "b", g); st != 1 {
				t.Fatalf("guest not running on b (state %d)", st)
			}
			assertStockQEMU(t, "b", g)
			assertTruth(t, g, "a", "b", start)
			checkPeerNodes(t, g, "a", "b", tls)

			// Post-copy, b -> a. QEMU 10 refuses post-copy together with
			// multifd, so this one runs on a single memory connection
			// (plus post-copy's own return path).
			// The pre-copy cap keeps it in pre-copy until the switch.
			start = time.Now()
			// With TLS the target node is named as well, as KubeVirt knows it.
			targetNode := ""
			if tls {
				targetNode = "a"
			}
			if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: g, From: "b", To: "a", TargetNode: targetNode, PostCopyAfter: 2 * time.Second, BandwidthMiBs: 64}); err != nil {
				t.Fatalf("post-copy: %v", err)
			}
			back := waitJob(t, "b", g, "Completed", 15*time.Second, drivenCompleted)
			checkProxied(t, back, tls, 1)
			if back.Mode != api.ModePostCopy {
				t.Errorf("mode %s: the migration finished before the switch to post-copy", back.Mode)
			}
			t.Logf("post-copy: mode %s, proxy relayed %d MiB on memory in %d connections",
				back.Mode, back.Proxy.Bytes["memory"]["toTarget"]>>20, back.Proxy.Bytes["memory"]["connections"])
			if st, _ := domainState(t, "a", g); st != 1 {
				t.Fatalf("guest not running on a after post-copy (state %d)", st)
			}
			assertStockQEMU(t, "a", g)
			assertTruth(t, g, "b", "a", start)
			checkPeerNodes(t, g, "b", "a", tls)
			if v, ok := ferryOn("a").metric("ferry_proxy_bytes_total", `stream="memory"`, `direction="to_target"`); !ok || v < float64(sent) {
				t.Errorf("ferry_proxy_bytes_total{stream=memory,direction=to_target} on a = %v, want >= %d", v, sent)
			}
			assertTornDown(t, "a", "b")
		})
	}
}

// checkPeerNodes: with mutual TLS each side's job names the other node,
// as the bed's certificates name them, in ferryctl's JSON and table; plain
// TCP names no one.
func checkPeerNodes(t *testing.T, g, from, to string, tls bool) {
	t.Helper()
	wantSrc, wantDst := to, from
	if !tls {
		wantSrc, wantDst = "", ""
	}
	var src, dst api.Job
	ctlJSON(t, from, &src, "job", g)
	ctlJSON(t, to, &dst, "job", g)
	if src.Role != api.RoleSource || src.PeerNode != wantSrc {
		t.Errorf("%s job on %s names peer node %q, want %q", src.Role, from, src.PeerNode, wantSrc)
	}
	if src.Proxy == nil || src.Proxy.TargetNode != wantSrc {
		t.Errorf("source's proxy account on %s names target node %+v, want %q", from, src.Proxy, wantSrc)
	}
	if dst.Role != api.RoleTarget || dst.PeerNode != wantDst {
		t.Errorf("%s job on %s names peer node %q, want %q", dst.Role, to, dst.PeerNode, wantDst)
	}
	out, err := exec.Command(ferryctlBin, "--socket", bed.Node(to).DebugSocket, "job", g).Output()
	if err != nil {
		t.Fatalf("ferryctl job %s on %s: %v", g, to, err)
	}
	if shown := regexp.MustCompile(`(?m)^Peer node:\s+(\S+)`).FindSubmatch(out); tls && (shown == nil || string(shown[1]) != wantDst) {
		t.Errorf("ferryctl job on %s does not show peer node %s:\n%s", to, wantDst, out)
	} else if !tls && shown != nil {
		t.Errorf("ferryctl job on %s shows a peer node over plain TCP:\n%s", to, out)
	}
}

func checkProxied(t *testing.T, j api.Job, tls bool, parallel int) {
	t.Helper()
	if j.Proxy == nil {
		t.Fatalf("job of %s does not show Ferry's proxy", j.Domain)
	}
	if j.Proxy.TLS != tls {
		t.Errorf("job says tls=%v, want %v", j.Proxy.TLS, tls)
	}
	if n := j.Proxy.Bytes["memory"]["connections"]; n < uint64(parallel) {
		t.Errorf("%d memory connections relayed, want at least %d (multifd)", n, parallel)
	}
}

// assertTornDown checks that no migration sockets or incoming migrations
// remain.
func assertTornDown(t *testing.T, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		dir := filepath.Join(bed.Node(n).Dir, "run", "ferry", "migrationproxy")
		// After a cut link the source cannot tell the target; the target
		// drops the migration a grace period after its side ends.
		waitFor(t, "node "+n+" to drop its incoming migrations and sockets", 90*time.Second, func() bool {
			p, err := ferryOn(n).c.Proxy(context.Background())
			if err != nil || len(p.Registered) > 0 {
				return false
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), "-source.sock") || strings.HasSuffix(e.Name(), "-target.sock") {
					return false
				}
			}
			return true
		})
	}
}

func openFDs(t *testing.T, pid int) int {
	return len(fdTargets(t, pid))
}

// fdTargets lists what a process's file descriptors point at.
func fdTargets(t *testing.T, pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("fds of pid %d: %v", pid, err)
	}
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out = append(out, l)
	}
	return out
}

func TestBrokenMigrationNamesTheProxyAndCleansUp(t *testing.T) {
	for _, fault := range []string{"reset-migration", "cut-link"} {
		t.Run(fault, func(t *testing.T) {
			g := "brk-" + strings.Split(fault, "-")[0]
			guest(t, testbed.GuestSpec{Name: g, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
			pidA, pidB := bed.FerrydPID("a"), bed.FerrydPID("b")
			fdsA, fdsB := openFDs(t, pidA), openFDs(t, pidB)
			since := time.Now()
			done := migrateAsync(t, testbed.MigrateSpec{Name: g, From: "a", To: "b", BandwidthMiBs: holdMiBs})
			waitJob(t, "a", g, "iteration 2", 2*time.Minute, func(j api.Job) bool { return j.Iteration >= 2 })
			var err error
			if fault == "reset-migration" {
				err = bed.ResetMigration()
			} else {
				err = bed.CutLink()
				defer bed.RestoreLink()
			}
			if err != nil {
				t.Fatalf("%s: %v", fault, err)
			}
			start := time.Now()
			// The job ends when libvirt gives up (at once on a reset, after
			// its keepalive on a cut link); the driver's account follows.
			want := "proxy"
			if fault == "cut-link" {
				want = "link"
			}
			// The driver's account, naming the proxy or the link, follows
			// libvirt's own end of the job.
			src := waitJob(t, "a", g, "Failed with the driver's account", 90*time.Second, func(j api.Job) bool {
				return j.Phase.Finished() && strings.HasPrefix(j.FailureReason, "migration failed: ") && strings.Contains(j.FailureReason, want)
			})
			t.Logf("%s: job ended %s %v after the fault: %s", fault, src.Phase, time.Since(start).Round(time.Second), src.FailureReason)
			if src.Phase != api.PhaseFailed {
				t.Fatalf("phase %s, want Failed", src.Phase)
			}
			if !strings.Contains(src.FailureReason, want) {
				t.Fatalf("failure reason does not name the %s: %q", want, src.FailureReason)
			}
			class := api.ClassConnectionReset
			if fault == "cut-link" {
				class = api.ClassLinkDown
			}
			assertClass(t, src, api.PlaneData, class)
			<-done
			if fault == "cut-link" {
				bed.RestoreLink()
			}
			if st, _ := domainState(t, "a", g); st != 1 {
				t.Errorf("guest not running on a after the failed migration (state %d)", st)
			}
			assertTornDown(t, "a", "b")
			assertTruth(t, g, "a", "b", since)
			deadline := time.Now().Add(15 * time.Second)
			for openFDs(t, pidA) > fdsA || openFDs(t, pidB) > fdsB {
				if time.Now().After(deadline) {
					t.Fatalf("ferryd file descriptors not back: a %d > %d or b %d > %d\na: %v\nb: %v",
						openFDs(t, pidA), fdsA, openFDs(t, pidB), fdsB, fdTargets(t, pidA), fdTargets(t, pidB))
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}

func TestProxyRefusesStrangersAndKeepsServing(t *testing.T) {
	before, _ := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="tls_handshake"`)
	target := bed.Node("b").ProxyAddr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A plain-TCP client speaking garbage to the TLS port, from node a.
	out, err := bed.Exec(ctx, "a", "sh", "-c", "printf 'FRY\\001\\002\\001x' | socat -T2 - TCP:"+target).CombinedOutput()
	t.Logf("plain client: %v %s", err, strings.TrimSpace(string(out)))
	waitFor(t, "the refusal to be counted", 10*time.Second, func() bool {
		v, ok := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="tls_handshake"`)
		return ok && v >= before+1
	})
	// ferryd keeps serving: a real migration right after.
	guest(t, testbed.GuestSpec{Name: "after-refusal", MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: -1})
	start := time.Now()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: "after-refusal", From: "a", To: "b"}); err != nil {
		t.Fatalf("migration after the refusal: %v", err)
	}
	assertTruth(t, "after-refusal", "a", "b", start)
}

// TestProxyRefusesToPrepareADomainTheTargetRuns: a prepare for a domain name
// that already runs on the target is refused there, before its libvirt is
// asked to prepare, counted, and leaves the guest running on the source and
// nothing behind on either node.
func TestProxyRefusesToPrepareADomainTheTargetRuns(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "twin", MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: -1})
	l, err := bed.Libvirt("b")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	// A paused namesake on b: no guest kernel needed.
	dom, err := l.DomainCreateXML(`<domain type='qemu'><name>twin</name><memory unit='MiB'>64</memory>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator><memballoon model='none'/></devices></domain>`, libvirt.DomainStartPaused)
	if err != nil {
		t.Fatal(err)
	}
	defer l.DomainDestroy(dom)
	before, _ := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="domain_exists"`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = bed.Migrate(ctx, testbed.MigrateSpec{Name: "twin", From: "a", To: "b"})
	if err == nil || !strings.Contains(err.Error(), "already runs on this node") {
		t.Fatalf("migrating onto a node that runs the same domain: %v, want a domain_exists refusal", err)
	}
	t.Logf("refused: %v", err)
	j := waitJob(t, "a", "twin", "the refused migration's job", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	assertClass(t, j, api.PlaneControl, api.ClassTargetRefused)
	if v, _ := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="domain_exists"`); v != before+1 {
		t.Errorf("ferry_proxy_rejected_total{reason=domain_exists} on b = %v, want %v", v, before+1)
	}
	if st, _ := domainState(t, "a", "twin"); st != 1 {
		t.Errorf("guest not running on a after the refusal (state %d)", st)
	}
	assertTornDown(t, "a", "b")
}
