//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/testpki"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/test/testbed"
)

// assertClass checks a finished job's failure plane and class, and that
// some evidence was kept.
func assertClass(t *testing.T, j migration.Job, plane migration.FailurePlane, class migration.FailureClass) {
	t.Helper()
	if j.FailurePlane != plane || j.FailureClass != class || len(j.FailureEvidence) == 0 {
		t.Errorf("%s job of %s (%s: %s): class %s/%s with evidence %q, want %s/%s",
			j.Role, j.Domain, j.Phase, j.FailureReason, j.FailurePlane, j.FailureClass, j.FailureEvidence, plane, class)
		return
	}
	t.Logf("%s job of %s: %s/%s, evidence: %s", j.Role, j.Domain, j.FailurePlane, j.FailureClass, strings.Join(j.FailureEvidence, "; "))
}

// A target whose proxy does not listen, a target whose libvirtd is down,
// and a source whose certificate the target does not trust: each fails
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
		class migration.FailureClass
		// refused is the reason the target's proxy counts the prepare
		// under, when the target's proxy answered.
		refused string
	}{
		{name: "target proxy down", guest: "cls-down", fault: ferrydArgs("b", "--proxy-listen="), class: migration.ClassTargetUnreachable},
		{name: "target libvirtd down", guest: "cls-nolv", class: migration.ClassTargetUnreachable, refused: "libvirt_unavailable",
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
		{name: "untrusted certificate", guest: "cls-tls", fault: ferrydArgs("a", "--proxy-tls-cert", stranger.Cert, "--proxy-tls-key", stranger.Key), class: migration.ClassAuthFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			g := c.guest
			guest(t, testbed.GuestSpec{Name: g, MemoryMiB: 256, DirtyMiB: 16, DirtyRateMiBs: -1})
			refusedBefore, _ := ferryOn("b").metric("ferry_proxy_rejected_total", `reason="`+c.refused+`"`)
			defer c.fault(t, ctx)()
			if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: g, From: "a", To: "b"}); err == nil {
				t.Fatal("the migration went through")
			}
			j := waitJob(t, "a", g, "the failed job", 15*time.Second, func(j migration.Job) bool { return j.Phase.Finished() })
			assertClass(t, j, migration.PlaneControl, c.class)
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
		})
	}
}
