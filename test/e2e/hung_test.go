//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/test/testbed"
)

// hungFor is how long the source's libvirtd stays stopped: past the 30 s
// the alert has, short of anything in the migration giving up.
const hungFor = 35 * time.Second

// The source's libvirtd is stopped (SIGSTOP) in the middle of a driven
// pre-copy, for 35 s. QEMU migrates on, and libvirt answers nothing, not
// even a keepalive PING. Within 30 s ferryd shows it hung (its metric,
// `ferryctl domains`) and Prometheus fires FerryLibvirtHung; once libvirtd
// goes on, the migration ends with the guest whole on exactly one node,
// one QEMU of it, and the alert clears.
func TestHungSourceLibvirtdIsAlertedAndTheGuestEndsOnOneNode(t *testing.T) {
	const name = "hung"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: 16, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: 32})
	waitJob(t, "a", name, "the first pass under way", time.Minute, func(j api.Job) bool { return j.DataProcessedBytes > 32<<20 })

	frozen := make(chan error, 1)
	stopped := time.Now()
	go func() { frozen <- bed.FreezeLibvirtd("a", hungFor) }()
	shown := waitFor(t, "node a's metric showing libvirt hung", 30*time.Second, func() bool {
		v, ok := ferryOn("a").metric("ferry_libvirt_unresponsive_seconds")
		return ok && v > 0
	})
	alerted, _ := waitAlert(t, "FerryLibvirtHung", "firing", 30*time.Second-time.Since(stopped), "node=a")
	t.Logf("libvirtd stopped at t; ferryd's metric showed it hung at t+%.1fs, FerryLibvirtHung firing at t+%.1fs",
		shown.Sub(stopped).Seconds(), alerted.Sub(stopped).Seconds())
	hungInDomains(t, "a")
	// The migration's owner is told on its job, which goes on waiting.
	waitJob(t, "a", name, "the job telling libvirt hangs", 30*time.Second, func(j api.Job) bool {
		return hasEvent(j, drive.EventLibvirtHung)
	})
	// Its slot's state: held, by a migration waiting on a hung libvirtd.
	waitFor(t, "node a's slots showing the migration's slot waits on a hung libvirtd", 10*time.Second, func() bool {
		v, ok := ferryOn("a").metric("ferry_migration_slots_hung")
		return ok && v == 1
	})

	if err := <-frozen; err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	err := <-done
	t.Logf("libvirtd went on at t+%.1fs; the migration ended %.1fs later: %v", thawed.Sub(stopped).Seconds(), time.Since(thawed).Seconds(), err)
	// Either end is one guest: completed on b, or failed and whole on a.
	ends, other := "b", "a"
	if err != nil {
		ends, other = "a", "b"
	}
	oneQEMU(t, name)
	endsWholeOn(t, name, ends, other, before, start)

	waitFor(t, "node a's metric back to 0", 30*time.Second, func() bool {
		v, ok := ferryOn("a").metric("ferry_libvirt_unresponsive_seconds")
		return ok && v == 0
	})
	if v, ok := ferryOn("a").metric("ferry_migration_slots_hung"); !ok || v != 0 {
		t.Errorf("node a's hung slots after the migration: %v (shown %v), want 0", v, ok)
	}
	waitFor(t, "FerryLibvirtHung resolved", 30*time.Second, func() bool {
		s, err := alerts("FerryLibvirtHung", "firing", "node=a")
		return err == nil && len(s) == 0
	})
	noPanics(t)
}

// hungInDomains fails unless `ferryctl domains` on node says its libvirt
// is hung.
func hungInDomains(t *testing.T, node string) {
	t.Helper()
	out, err := exec.Command(ferryctlBin, "--socket", bed.Node(node).DebugSocket, "domains").CombinedOutput()
	if err != nil {
		t.Fatalf("ferryctl domains: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "HUNG: nothing from libvirt for") {
		t.Fatalf("ferryctl domains on %s does not say libvirt is hung:\n%s", node, out)
	}
	t.Logf("ferryctl domains on %s: %s", node, strings.SplitN(string(out), "\n", 2)[0])
}

// libvirt 11's own daemon takes Ferry's keepalive: it says yes when asked,
// its PINGs to an idle connection are answered (it would close one that
// stayed silent 30 s), a stopped daemon is reported unresponsive within
// 15 s, since its last packet, and once it goes on the connection that
// only reported it still works.
func TestKeepAliveWithTheBedsLibvirtd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := libvirtx.Dial(ctx, bed.Node("b").LibvirtSocket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.KeepAliveOn() {
		t.Fatal("libvirtd said no to keepalive")
	}
	// Idle past libvirtd's own limit of 30 s: only its PINGs and Ferry's
	// answers go over the connection.
	time.Sleep(35 * time.Second)
	select {
	case <-c.Done():
		t.Fatal("libvirtd closed an idle keepalive connection: its PINGs went unanswered")
	default:
	}
	if _, ok := c.Unresponsive(); ok {
		t.Fatal("unresponsive while libvirtd runs")
	}
	frozen := make(chan error, 1)
	stopped := time.Now()
	go func() { frozen <- bed.FreezeLibvirtd("b", 20*time.Second) }()
	at := waitFor(t, "the connection unresponsive", 20*time.Second, func() bool { _, ok := c.Unresponsive(); return ok })
	since, _ := c.Unresponsive()
	t.Logf("libvirtd stopped at t; unresponsive at t+%.1fs, since t%+.1fs", at.Sub(stopped).Seconds(), since.Sub(stopped).Seconds())
	if err := <-frozen; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection responsive again", 10*time.Second, func() bool { _, ok := c.Unresponsive(); return !ok })
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("a call once libvirtd went on: %v", err)
	}
}
