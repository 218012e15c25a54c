package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
)

// guestsOf collects what collectGuests serves of doms, as name{labels}.
func guestsOf(t *testing.T, c *Collector, doms []api.Domain) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.collectGuests(ch, doms)
	close(ch)
	var out []string
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		name := defActive.Name
		if m.Desc() == descExpected {
			name = defExpected.Name
		}
		out = append(out, name+seriesString(&pb))
	}
	return out
}

// Only a domain holding its guest is served; the incoming side of a
// migration, and the source it left, are not a second copy.
func TestOnlyDomainsHoldingTheirGuestAreActive(t *testing.T) {
	c := NewCollector("a", "test", nil, nil)
	c.VMIUID = func(socket, domain, uuid string) string {
		if domain == "ns_vm" && uuid == "u1" {
			return "vmi-1"
		}
		return "wrong"
	}
	c.ExpectedVMIs = func() []api.VMIInfo { return []api.VMIInfo{{Namespace: "ns", Name: "vm", UID: "vmi-1"}} }
	got := guestsOf(t, c, []api.Domain{
		{Name: "ns_vm", Namespace: "ns", VMI: "vm", UUID: "u1", Socket: "/s1", State: "running", HoldsGuest: true},
		{Name: "ns_vm", Namespace: "ns", VMI: "vm", UUID: "u1", Socket: "/s2", State: "paused", Reason: "migration"},
		{Name: "plain", UUID: "u2", Socket: "/s1", State: "paused", Reason: "user", HoldsGuest: true},
	})
	want := []string{
		`ferry_domain_active{domain="ns_vm",name="vm",namespace="ns",node="a",socket="/s1",state="running",uuid="u1",vmi_uid="vmi-1"} 1`,
		`ferry_domain_active{domain="plain",name="",namespace="",node="a",socket="/s1",state="paused",uuid="u2",vmi_uid=""} 1`,
		`ferry_vmi_expected{name="vm",namespace="ns",node="a",vmi_uid="vmi-1"} 1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("served:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Each ended job is observed once per figure libvirt gave: a downtime it
// left out is no downtime of 0.
func TestTimesObserveOnlyWhatLibvirtGave(t *testing.T) {
	times := NewTimes("a", nil)
	times.Observe(migration.EndedTimes{Role: api.RoleSource, Result: "completed", Downtime: 42 * time.Millisecond, Duration: 2300 * time.Millisecond})
	times.Observe(migration.EndedTimes{Role: api.RoleTarget, Result: "completed", Duration: 4 * time.Second})
	if n := testutil.CollectAndCount(times.downtime); n != 1 {
		t.Errorf("%d downtime series, want the source's only", n)
	}
	if n := testutil.CollectAndCount(times.duration); n != 2 {
		t.Errorf("%d duration series, want 2", n)
	}
	want := `
# HELP ferry_migration_downtime_seconds ` + defDowntime.Help + `
# TYPE ferry_migration_downtime_seconds histogram
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="0.005"} 0
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="0.01"} 0
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="0.025"} 0
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="0.05"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="0.1"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="0.25"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="0.5"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="1"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="2.5"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="5"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="10"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="30"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="60"} 1
ferry_migration_downtime_seconds_bucket{node="a",result="completed",role="source",le="+Inf"} 1
ferry_migration_downtime_seconds_sum{node="a",result="completed",role="source"} 0.042
ferry_migration_downtime_seconds_count{node="a",result="completed",role="source"} 1
`
	if err := testutil.CollectAndCompare(times.downtime, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
