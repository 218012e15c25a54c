//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/test/testbed"
)

// migrationParameter is one of QEMU's numeric migration parameters on a
// node, as QEMU itself reports it through that node's libvirt.
func migrationParameter(node, domain, param string) (uint64, error) {
	var params map[string]any
	if err := qemuAnswer(node, domain, "query-migrate-parameters", &params); err != nil {
		return 0, err
	}
	v, _ := params[param].(float64)
	return uint64(v), nil
}

// qemuAnswer asks a domain's QEMU a QMP command through its node's
// libvirt and decodes what it returns into v.
func qemuAnswer(node, domain, command string, v any) error {
	l, err := bed.Libvirt(node)
	if err != nil {
		return err
	}
	defer l.Disconnect()
	d, err := l.DomainLookupByName(domain)
	if err != nil {
		return err
	}
	out, err := l.QEMUDomainMonitorCommand(d, fmt.Sprintf(`{"execute":%q}`, command), 0)
	if err != nil {
		return err
	}
	var r struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return err
	}
	return json.Unmarshal(r.Return, v)
}

// passRates are a job's passes as QEMU measured them, in MiB/s.
func passRates(j api.Job) string {
	var rates []string
	for _, it := range j.Iterations {
		rates = append(rates, fmt.Sprintf("%.1f", float64(it.TransferRateBytesPerSecond)/(1<<20)))
	}
	return strings.Join(rates, " ")
}

// What this test proves: once a plain migration has shown the path
// sustains a migration's cap, the next capped migration to that node is
// told the cap for its switch-over (bandwidth.avail.switchover), QEMU
// holds it, the job says why, and the guest completes on one node,
// pausing no longer than its downtime cap allows. The guest keeps
// rewriting zero pages, the case where QEMU's own figure (bytes sent over
// time spent) can sink below what the wire carries; the figures of a
// migration left to QEMU's own figure are printed beside the told one.
// Whether the told figure also switches over sooner depends on the link:
// QEMU counts a dirty zero page as a whole page of what remains, so the
// zero pages that could fill its 100 ms measuring windows are far more
// than a 48 MiB/s cap lets it switch over with, told or not (docs/proxy.md,
// Switch-over bandwidth).
func TestQEMUHoldsTheSwitchoverBandwidthTheWireShowed(t *testing.T) {
	const (
		name     = "zeros"
		capMiBs  = holdMiBs
		deadline = 40 * time.Second
	)
	// A fresh ferryd on a: no migration over the path yet.
	if err := bed.SetNodeFerrydArgs(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, Fill: "zero"})
	before := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: capMiBs, Deadline: deadline})
	err := <-before
	j0 := waitJob(t, "a", name, "ended", 30*time.Second, func(j api.Job) bool { return j.EndTime != nil && j.Proxy != nil && j.Proxy.Ended })
	down0 := "none"
	if j0.Phase == api.PhaseCompleted {
		down0 = targetDowntime(t, name).String()
	}
	t.Logf("left to QEMU's figure: %s after %.1fs, %d passes, downtime %s; QEMU measured %s MiB/s, the wire carried %s/s (migrate: %v)",
		j0.Phase, j0.EndTime.Sub(j0.StartTime).Seconds(), j0.Iteration, down0, passRates(j0), fmtMiB(j0.Proxy.WireBytesPerSecond), err)

	// The case this test is about: QEMU's own figure for this guest falls
	// well below the cap it sends at. Said, not required: on a busy
	// machine QEMU's scan can keep up (a CI run measured 31-49 MiB/s at
	// 48 and completed in 5 s), and what follows (QEMU holds the figure
	// it is told, the pause stays within the cap) holds either way.
	var qemu []float64
	for _, it := range j0.Iterations {
		if it.TransferRateBytesPerSecond > 0 {
			qemu = append(qemu, float64(it.TransferRateBytesPerSecond))
		}
	}
	below := len(qemu) > 0 && migration.Median(qemu) <= 0.8*float64(capMiBs<<20)
	t.Logf("QEMU's own figure well below the %d MiB/s cap (median at most 80 %%): %v", capMiBs, below)
	if j0.Phase == api.PhaseCompleted {
		if err := <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "b", To: "a", Via: "ferry"}); err != nil {
			t.Fatalf("the migration back to a failed: %v", err)
		}
	}
	// The path shows what it sustains on a plain migration long enough
	// to time: 384 MiB of stamped pages, 8 s at the cap.
	guest(t, testbed.GuestSpec{Name: "zeros-warm", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: -1})
	if err := <-migrateAsync(t, testbed.MigrateSpec{Name: "zeros-warm", From: "a", To: "b", Via: "ferry", BandwidthMiBs: capMiBs}); err != nil {
		t.Fatalf("the warm-up migration failed: %v", err)
	}
	w := waitJob(t, "a", "zeros-warm", "Completed", 30*time.Second, drivenCompleted)
	if w.Proxy == nil || w.Proxy.WireBytesPerSecond == 0 {
		t.Fatalf("the source proxy measured no wire rate: %+v", w.Proxy)
	}

	start := time.Now()
	after := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: capMiBs, Deadline: deadline})
	var told uint64
	waitFor(t, "QEMU on a holding a switch-over bandwidth", time.Minute, func() bool {
		told, _ = migrationParameter("a", name, "avail-switchover-bandwidth")
		return told > 0
	})
	if err := <-after; err != nil {
		t.Fatalf("told the wire's rate, the migration still failed: %v", err)
	}
	j := waitJob(t, "a", name, "Completed", 30*time.Second, func(x api.Job) bool { return drivenCompleted(x) && !x.StartTime.Before(start.Add(-time.Second)) })
	if j.Proxy == nil || j.Proxy.SwitchoverBandwidthMiBs<<20 != told {
		t.Fatalf("QEMU holds %s/s for its switch-over, the job says %+v", fmtMiB(told), j.Proxy)
	}
	if told != uint64(capMiBs)<<20 {
		t.Errorf("QEMU was told %s/s, not the migration's cap of %d MiB/s", fmtMiB(told), capMiBs)
	}
	down := targetDowntime(t, name)
	t.Logf("told %s/s (%s): Completed after %.1fs, %d passes, downtime %s",
		fmtMiB(told), j.Proxy.SwitchoverFrom, j.EndTime.Sub(j.StartTime).Seconds(), j.Iteration, down)
	t.Logf("downtime left to QEMU's figure %s, told the cap %s, allowed 300 ms", down0, down)
	if down > 300*time.Millisecond+200*time.Millisecond {
		t.Errorf("the guest paused %s, more than the 300 ms allowed and a margin", down)
	}
	assertTruth(t, name, "a", "b", start)
}

// targetDowntime is how long the guest was paused in its last migration
// to b, as b's libvirt recorded it.
func targetDowntime(t *testing.T, name string) time.Duration {
	t.Helper()
	n, err := readNodeTruth("b", name)
	if err != nil || n.Stats == nil {
		t.Fatalf("b's libvirt keeps no completed statistics of %s: %v", name, err)
	}
	return time.Duration(n.Stats.DowntimeMs) * time.Millisecond
}
