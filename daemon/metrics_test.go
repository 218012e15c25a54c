package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// everyPhase is a tracker holding a job in every phase, a domain needing
// attention, and the same domain name on two sockets.
func everyPhase(t *testing.T) *migration.Tracker {
	t.Helper()
	tr := migration.NewTracker(migration.Config{Node: "n1"})
	now := time.Now()
	out := func(name string, id int32) libvirtx.Domain {
		ref := libvirt.Domain{Name: name, UUID: libvirt.UUID{byte(id)}, ID: id}
		return libvirtx.Domain{Ref: ref, Name: name, State: libvirtx.StateRunning, Reason: 1}
	}
	active := libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, MemoryIteration: 2,
		DataTotal: 1 << 30, MemoryTotal: 1 << 30, DataRemaining: 1 << 29, MemoryRemaining: 1 << 29, MemoryBps: 1 << 26, TimeElapsedMs: 2000}
	event := func(sock string, d libvirtx.Domain, ev, detail int32) {
		tr.ApplyEvent(libvirtx.Event{Kind: libvirtx.KindLifecycle, Socket: sock, Domain: d.Ref, Event: ev, Detail: detail, Time: now})
	}
	const s1, s2 = "/run/a/sock", "/run/b/sock"
	tr.ApplyStats(s1, out("ns_running", 1), active, now)
	tr.ApplyStats(s2, out("ns_running", 2), active, now) // same name, other socket
	event(s1, out("ns_target", 3), libvirtx.EventStarted, libvirtx.StartedMigrated)

	tr.ApplyStats(s1, out("ns_completed", 4), active, now)
	event(s1, out("ns_completed", 4), libvirtx.EventStopped, libvirtx.StoppedMigrated)

	tr.ApplyStats(s1, out("ns_failed", 5), active, now)
	event(s1, out("ns_failed", 5), libvirtx.EventStopped, libvirtx.StoppedFailed)

	tr.ApplyStats(s1, out("ns_aborted", 6), active, now)
	tr.ApplyStats(s1, out("ns_aborted", 6), libvirtx.JobStats{Type: libvirtx.JobNone}, now.Add(time.Second))
	tr.ApplyEnded(s1, out("ns_aborted", 6), libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut}, now.Add(2*time.Second))

	tr.ApplyStats(s1, out("ns_pcf", 7), active, now)
	event(s1, out("ns_pcf", 7), libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	event(s1, out("ns_pcf", 7), libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)

	tr.ApplyStats("/run/gone/sock", out("ns_lost", 8), active, now)
	tr.Lost("/run/gone/sock", libvirtx.ErrSocketGone)

	seen := map[migration.Phase]bool{}
	for _, j := range tr.Jobs(true) {
		seen[j.Phase] = true
	}
	for _, p := range []migration.Phase{migration.PhaseRunning, migration.PhaseCompleted, migration.PhaseFailed,
		migration.PhaseAborted, migration.PhasePostCopyFailed, migration.PhaseLost} {
		if !seen[p] {
			t.Fatalf("fixture has no %s job: %+v", p, tr.Jobs(true))
		}
	}
	return tr
}

func TestMetricsOfEveryPhaseArePromlintClean(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector("n1", "test", everyPhase(t), nil))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	n, err := testutil.GatherAndCount(reg, "ferry_migration_info")
	if err != nil || n != 3 {
		t.Fatalf("%d in-flight job series (%v), want 3: two sockets' ns_running and ns_target", n, err)
	}
	want := `
# HELP ferry_domain_attention Domains in a state an operator must act on (1 while it lasts).
# TYPE ferry_domain_attention gauge
ferry_domain_attention{domain="ns_pcf",name="pcf",namespace="ns",node="n1",reason="postcopy_failed",socket="/run/a/sock"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ferry_domain_attention"); err != nil {
		t.Fatal(err)
	}
	mfs, _ := reg.Gather()
	results := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_migrations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					results[l.GetValue()] = true
				}
			}
		}
	}
	for _, r := range []string{"completed", "failed", "aborted", "postcopy_failed", "lost"} {
		if !results[r] {
			t.Errorf("ferry_migrations_total has no result=%q series", r)
		}
	}
}

// brokenCollector emits the same series twice, as two jobs with equal
// labels once did.
type brokenCollector struct{ d *prometheus.Desc }

func (b brokenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.d }
func (b brokenCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(b.d, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(b.d, prometheus.GaugeValue, 2)
}

func TestOneBadSeriesDoesNotFailTheScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector("n1", "test", everyPhase(t), nil))
	reg.MustRegister(brokenCollector{prometheus.NewDesc("ferry_test_duplicate", "Emitted twice.", nil, nil)})
	rec := httptest.NewRecorder()
	metricsHandler(reg, zap.NewNop()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK || !strings.Contains(string(body), "ferry_migration_info") {
		t.Fatalf("scrape answered %d without the good series:\n%s", rec.Code, body)
	}
}
