//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/testpki"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/test/testbed"
)

// assertClass checks a finished job's failure plane and class, and that
// some evidence was kept.
func assertClass(t *testing.T, j api.Job, plane api.FailurePlane, class api.FailureClass) {
	t.Helper()
	if j.FailurePlane != plane || j.FailureClass != class || len(j.FailureEvidence) == 0 {
		t.Errorf("%s job of %s (%s: %s): class %s/%s with evidence %q, want %s/%s",
			j.Role, j.Domain, j.Phase, j.FailureReason, j.FailurePlane, j.FailureClass, j.FailureEvidence, plane, class)
		return
	}
	t.Logf("%s job of %s: %s/%s, evidence: %s", j.Role, j.Domain, j.FailurePlane, j.FailureClass, strings.Join(j.FailureEvidence, "; "))
}

// A target whose proxy does not listen, a target whose libvirtd is down,
// a source whose certificate the target does not trust, and a target
// address answered by another node than the one asked for: each fails
// before libvirt starts a job, and the failure is still recorded,
// classified and counted.
func TestPrepareFailuresAreClassified(t *testing.T) {
	ca, err := testpki.NewCA("not the cluster's CA")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := ca.Issue(filepath.Join(bed.Dir(), "stranger-tls"), testbed.PeerName)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(filepath.Dir(stranger.Cert))
	ferrydArgs := func(node string, args ...string) func(*testing.T, context.Context) func() {
		return func(t *testing.T, ctx context.Context) func() {
			undo := func() { bed.SetNodeFerrydArgs(context.Background(), node) }
			if err := bed.SetNodeFerrydArgs(ctx, node, args...); err != nil {
				undo()
				t.Fatal(err)
			}
			return undo
		}
	}
	cases := []struct {
		name  string
		guest string
		fault func(*testing.T, context.Context) (undo func())
		// targetNode is the node the migration asks for.
		targetNode string
		class      api.FailureClass
		// refused is the reason the target's proxy counts the prepare
		// under, when the target's proxy answered.
		refused string
	}{
		{name: "target proxy down", guest: "cls-down", fault: ferrydArgs("b", "--proxy-listen="), class: api.ClassTargetUnreachable},
		{name: "target libvirtd down", guest: "cls-nolv", class: api.ClassTargetUnreachable, refused: "libvirt_unavailable",
			fault: func(t *testing.T, ctx context.Context) func() {
				if err := bed.StopLibvirtd("b"); err != nil {
					t.Fatal(err)
				}
				return func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if err := bed.StartLibvirtd(ctx, "b"); err != nil {
						t.Fatalf("starting libvirtd on b again: %v", err)
					}
					waitFor(t, "ferryd b reconnected to libvirt", time.Minute, func() bool {
						v, ok := ferryOn("b").metric("ferry_libvirt_up")
						return ok && v == 1
					})
				}
			}},
		{name: "another node at the target's address", guest: "cls-node", targetNode: "c", class: api.ClassAuthFailed},
		{name: "untrusted certificate", guest: "cls-tls", fault: ferrydArgs("a", "--proxy-tls-cert", stranger.Cert, "--proxy-tls-key", stranger.Key), class: api.ClassAuthFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			g := c.guest
			guest(t, testbed.GuestSpec{Name: g, MemoryMiB: 256, DirtyMiB: 16, DirtyRateMiBs: -1})
			refusedBefore, _ := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="`+c.refused+`"`)
			if c.fault != nil {
				defer c.fault(t, ctx)()
			}
			if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: g, From: "a", To: "b", TargetNode: c.targetNode}); err == nil {
				t.Fatal("the migration went through")
			}
			j := waitJob(t, "a", g, "the failed job", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
			assertClass(t, j, api.PlaneControl, c.class)
			if v, _ := ferryOn("a").metric("ferry_migrations_total", `result="failed"`, `class="`+string(c.class)+`"`); v < 1 {
				t.Errorf("ferry_migrations_total{class=%s} = %v, want it counted", c.class, v)
			}
			if c.refused != "" {
				if v, _ := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="`+c.refused+`"`); v != refusedBefore+1 {
					t.Errorf("target's ferry_proxy_rejected_total{reason=%q} went %v -> %v, want one refusal", c.refused, refusedBefore, v)
				}
			}
			if st, _ := domainState(t, "a", g); st != 1 {
				t.Errorf("guest not running on a (state %d)", st)
			}
			if c.targetNode != "" {
				// Refused on the certificate: the domain's XML never
				// reached b, whose ferryd never heard the name.
				log, err := os.ReadFile(filepath.Join(bed.Node("b").Dir, "ferryd.log"))
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(log), g) {
					t.Errorf("node b's ferryd log names %s: the prepare reached it", g)
				}
			}
		})
	}
}

// The target's ferryd crashes mid-migration and its DaemonSet starts it
// again: the streams it relayed are gone, the new ferryd has never heard
// of the migration, and the source must say so rather than only "reset".
func TestTargetFerrydCrashMidMigration(t *testing.T) {
	const g = "cls-crash"
	guest(t, testbed.GuestSpec{Name: g, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	done := migrateAsync(t, testbed.MigrateSpec{Name: g, From: "a", To: "b", BandwidthMiBs: holdMiBs})
	waitJob(t, "a", g, "iteration 1 under way", 2*time.Minute, func(j api.Job) bool { return j.Iteration >= 1 && j.DataProcessedBytes > 64<<20 })
	unknownBefore, _ := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="unknown_migration"`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.CrashFerryd(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the migration completed through a target proxy that crashed")
	}
	src := waitJob(t, "a", g, "the failed job", 30*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	t.Logf("source: %s: %s", src.Phase, src.FailureReason)
	// Whether the source's finish met nothing at the target's address or
	// the new ferryd is a race with the restart; either says the target
	// lost the migration.
	assertClass(t, src, api.PlaneControl, api.ClassTargetUnreachable)
	if !strings.Contains(strings.Join(src.FailureEvidence, " "), "ferryd") {
		t.Errorf("evidence does not say the target's ferryd went away: %q", src.FailureEvidence)
	}
	v, _ := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="unknown_migration"`)
	t.Logf("the restarted target's refusals of unknown migrations: %v -> %v", unknownBefore, v)
	if st, _ := domainState(t, "a", g); st != 1 {
		t.Errorf("guest not running on a (state %d)", st)
	}
	// libvirt on the target kills the incoming QEMU once the connection
	// that prepared it (the crashed ferryd's) is gone.
	waitFor(t, "no "+g+" left on b", 30*time.Second, func() bool { return !domainExists(t, "b", g) })
}

// domainExists asks a node's libvirt whether it has the domain at all.
func domainExists(t *testing.T, node, name string) bool {
	t.Helper()
	l, err := bed.Libvirt(node)
	if err != nil {
		t.Fatalf("libvirt on %s: %v", node, err)
	}
	defer l.Disconnect()
	_, err = l.DomainLookupByName(name)
	if err != nil && !libvirtx.IsNoDomain(err) {
		t.Fatalf("lookup %s on %s: %v", name, node, err)
	}
	return err == nil
}
