package metrics

import (
	"fmt"
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

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
)

// sampleEvery is the fixtures' sample interval: each step a test sets on
// a fake libvirt is read within it.
const sampleEvery = 20 * time.Millisecond

func runningDomain(name string, id int32) libvirtxtest.Domain {
	return libvirtxtest.Domain{Name: name, UUID: libvirt.UUID{byte(id)}, ID: id, State: int32(libvirtx.StateRunning), Reason: 1}
}

// migratingOut is an outgoing migration's reading at its second pass.
var migratingOut = libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, MemoryIteration: 2,
	DataTotal: 1 << 30, MemoryTotal: 1 << 30, DataRemaining: 1 << 29, MemoryRemaining: 1 << 29, MemoryBps: 1 << 26, TimeElapsedMs: 2000}

// everyPhase is a tracker holding a job in every phase, a domain needing
// attention, and the same domain name on two sockets, read by its sampler
// from fake libvirt daemons; a is the socket of all but one of them.
func everyPhase(t *testing.T) (tr *migration.Tracker, a string) {
	t.Helper()
	tr = migration.NewTracker(migration.Config{Node: "n1", SampleInterval: sampleEvery})
	fa, fb, fgone := libvirtxtest.New(t, ""), libvirtxtest.New(t, ""), libvirtxtest.New(t, "")
	migrationtest.Serve(t, tr, fa)
	migrationtest.Serve(t, tr, fb)
	gone := migrationtest.Serve(t, tr, fgone)
	type at struct {
		f    *libvirtxtest.Server
		name string
	}
	jobs := []at{{fa, "ns_running"}, {fb, "ns_running"}, {fa, "ns_completed"}, {fa, "ns_failed"}, {fa, "ns_aborted"}, {fa, "ns_pcf"}, {fgone, "ns_lost"}}
	for i, j := range jobs {
		j.f.SetDomain(runningDomain(j.name, int32(i+1)))
		j.f.SetJob(j.name, migratingOut)
	}
	for _, j := range jobs {
		migrationtest.WaitJob(t, tr, j.f.Path(), j.name, "running", func(j api.Job) bool { return j.Phase == api.PhaseRunning && j.ElapsedMs == 2000 })
	}
	// What libvirt says once each ended, then its event, as libvirt has
	// changed the state by the time its event is read.
	end := func(name string, st libvirtx.State, reason, event, detail int32) {
		fa.SetState(name, int32(st), reason)
		fa.Lifecycle(name, event, detail)
	}
	// A transient domain is gone once migrated: only the event says how.
	fa.RemoveDomain("ns_completed")
	fa.Lifecycle("ns_completed", libvirtx.EventStopped, libvirtx.StoppedMigrated)
	end("ns_failed", libvirtx.StateShutoff, libvirtx.ShutoffFailed, libvirtx.EventStopped, libvirtx.StoppedFailed)
	fa.SetJob("ns_aborted", nil)
	fa.SetCompletedJob("ns_aborted", libvirtx.JobStats{Type: libvirtx.JobCancelled, Operation: libvirtx.OperationMigrationOut})
	end("ns_pcf", libvirtx.StatePaused, libvirtx.PausedPostCopy, libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	migrationtest.WaitJob(t, tr, fa.Path(), "ns_pcf", "in post-copy", func(j api.Job) bool { return j.Mode == api.ModePostCopy })
	end("ns_pcf", libvirtx.StatePaused, libvirtx.PausedPostCopyFailed, libvirtx.EventSuspended, libvirtx.SuspendedPostCopyFailed)

	target := libvirtxtest.Domain{Name: "ns_target", UUID: libvirt.UUID{9}, ID: 9, State: int32(libvirtx.StatePaused), Reason: libvirtx.PausedMigration}
	fa.SetDomain(target)
	fa.SetJob(target.Name, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationIn})
	fa.Lifecycle(target.Name, libvirtx.EventStarted, libvirtx.StartedMigrated)

	gone.Stop()
	tr.Lost(fgone.Path(), libvirtx.ErrSocketGone)

	for name, phase := range map[string]api.Phase{"ns_completed": api.PhaseCompleted, "ns_failed": api.PhaseFailed,
		"ns_aborted": api.PhaseAborted, "ns_pcf": api.PhasePostCopyFailed, "ns_target": api.PhaseRunning} {
		migrationtest.WaitJob(t, tr, fa.Path(), name, string(phase), func(j api.Job) bool { return j.Phase == phase })
	}
	seen := map[api.Phase]bool{}
	for _, j := range tr.Jobs(true) {
		seen[j.Phase] = true
	}
	for _, p := range []api.Phase{api.PhaseRunning, api.PhaseCompleted, api.PhaseFailed,
		api.PhaseAborted, api.PhasePostCopyFailed, api.PhaseLost} {
		if !seen[p] {
			t.Fatalf("fixture has no %s job: %+v", p, tr.Jobs(true))
		}
	}
	return tr, fa.Path()
}

func TestMetricsOfEveryPhaseArePromlintClean(t *testing.T) {
	tr, a := everyPhase(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector("n1", "test", tr, nil))
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
ferry_domain_attention{domain="ns_pcf",name="pcf",namespace="ns",node="n1",reason="postcopy_failed",socket="%s"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(want, a)), "ferry_domain_attention"); err != nil {
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
	tr, _ := everyPhase(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector("n1", "test", tr, nil))
	reg.MustRegister(brokenCollector{prometheus.NewDesc("ferry_test_duplicate", "Emitted twice.", nil, nil)})
	rec := httptest.NewRecorder()
	RegistryHandler(reg, zap.NewNop()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK || !strings.Contains(string(body), "ferry_migration_info") {
		t.Fatalf("scrape answered %d without the good series:\n%s", rec.Code, body)
	}
}
