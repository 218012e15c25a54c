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

// A target whose proxy does not listen, and a source whose certificate the
// target does not trust: both fail before libvirt starts a job, and the
// failure is still recorded, classified and counted.
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
	cases := []struct {
		name  string
		guest string
		node  string
		args  []string
		class migration.FailureClass
	}{
		{name: "target proxy down", guest: "cls-down", node: "b", args: []string{"--proxy-listen="}, class: migration.ClassTargetUnreachable},
		{name: "untrusted certificate", guest: "cls-tls", node: "a", args: []string{"--proxy-tls-cert", stranger.Cert, "--proxy-tls-key", stranger.Key}, class: migration.ClassAuthFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := bed.SetNodeFerrydArgs(ctx, c.node, c.args...); err != nil {
				t.Fatal(err)
			}
			defer bed.SetNodeFerrydArgs(context.Background(), c.node)
			g := c.guest
			guest(t, testbed.GuestSpec{Name: g, MemoryMiB: 256, DirtyMiB: 16, DirtyRateMiBs: -1})
			if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: g, From: "a", To: "b"}); err == nil {
				t.Fatal("the migration went through")
			}
			j := waitJob(t, "a", g, "the failed job", 15*time.Second, func(j migration.Job) bool { return j.Phase.Finished() })
			assertClass(t, j, migration.PlaneControl, c.class)
			if v, _ := ferryOn("a").metric("ferry_migrations_total", `result="failed"`, `class="`+string(c.class)+`"`); v < 1 {
				t.Errorf("ferry_migrations_total{class=%s} = %v, want it counted", c.class, v)
			}
			if st, _ := domainState(t, "a", g); st != 1 {
				t.Errorf("guest not running on a (state %d)", st)
			}
		})
	}
}
