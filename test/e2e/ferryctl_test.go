//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// TestFerryctlMigrateThenPostCopy drives a migration the way an operator
// would: `ferryctl migrate --postcopy` on the source node, then `ferryctl
// postcopy` once it is under way; migrate's exit status says how it ended.
func TestFerryctlMigrateThenPostCopy(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "ctl", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	start := time.Now()
	migrate := exec.CommandContext(ctx, ferryctlBin, "--socket", bed.Node("a").DebugSocket, "-o", "json",
		"migrate", "ctl", "--to", bed.Node("b").ProxyAddr, "--to-node", "b", "--postcopy", "--bandwidth-mibs", "64")
	migrate.Stdout, migrate.Stderr = &out, &errOut
	if err := migrate.Start(); err != nil {
		t.Fatal(err)
	}
	waitJob(t, "a", "ctl", "pre-copy under way", time.Minute, func(j api.Job) bool {
		return j.Phase == api.PhaseRunning && j.Iteration >= 1
	})
	var res api.AbortResult
	ctlJSON(t, "a", &res, "postcopy", "ctl")
	t.Logf("ferryctl postcopy: %s", res.Message)
	if err := migrate.Wait(); err != nil {
		t.Fatalf("ferryctl migrate: %v\n%s", err, errOut.String())
	}
	// -o json streams the job's updates; the last line is how it ended.
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var last api.Job
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("last line of ferryctl migrate -o json: %v\n%s", err, lines[len(lines)-1])
	}
	if last.Phase != api.PhaseCompleted || last.Mode != api.ModePostCopy {
		t.Fatalf("ferryctl migrate ended with %s in %s", last.Phase, last.Mode)
	}
	if st, _ := domainState(t, "b", "ctl"); st != 1 {
		t.Fatalf("guest not running on b (state %d)", st)
	}
	assertTruth(t, "ctl", "a", "b", start)
}

// TestAbortedVMIMigrationGetsAnEvent: outcomes short of a post-copy failure
// get an Event on the VMI and leave its status alone.
func TestAbortedVMIMigrationGetsAnEvent(t *testing.T) {
	kubeUp(t)
	createVMI(t, "aborted")
	domain := "default_aborted"
	guest(t, testbed.GuestSpec{Name: domain, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
	before := getVMI(t, "aborted")
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: domain, From: "a", To: "b", BandwidthMiBs: holdMiBs})
	waitJob(t, "a", domain, "iteration 2", 2*time.Minute, func(j api.Job) bool { return j.Iteration >= 2 })
	var j api.Job
	ctlJSON(t, "a", &j, "abort", domain)
	<-done
	waitFor(t, "a MigrationAborted event", 15*time.Second, func() bool {
		evs, err := kube.Clientset.CoreV1().Events("default").List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.name=aborted,reason=MigrationAborted"})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Type == "Normal"
	})
	after := getVMI(t, "aborted")
	if b, a := before.Object["status"], after.Object["status"]; !jsonEqual(b, a) {
		t.Errorf("status changed on an aborted migration:\nbefore %v\nafter  %v", b, a)
	}
	assertTruth(t, domain, "a", "b", start)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
