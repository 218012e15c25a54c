package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
)

// benchTracker is a tracker with n jobs in flight, found by its sampler on
// a fake libvirt serving n migrating domains; the sampler is then stopped,
// so that scraping alone is measured.
func benchTracker(b *testing.B, n int) *migration.Tracker {
	tr := migration.NewTracker(migration.Config{Node: "bench"})
	if n == 0 {
		return tr
	}
	f := libvirtxtest.New(b, "")
	doms := make([]libvirtxtest.Domain, n)
	for i := range doms {
		doms[i] = runningDomain(fmt.Sprintf("ns%d_vm%d", i%50, i), int32(i+1))
	}
	f.SetDomains(doms...)
	for _, d := range doms {
		f.SetJob(d.Name, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
			MemoryIteration: 3, DataTotal: 8 << 30, MemoryTotal: 8 << 30, DataRemaining: 1 << 30, MemoryBps: 1 << 30, MemoryDirtyRate: 100 << 20})
	}
	feed := migrationtest.Serve(b, tr, f)
	migrationtest.Wait(b, fmt.Sprintf("the tracker to find %d jobs", n), func() bool { return len(tr.Jobs(false)) == n })
	feed.Stop()
	return tr
}

func benchServe(b *testing.B, h http.Handler) {
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("scrape %d", w.Code)
		}
	}
}

// BenchmarkScrape serves a whole /metrics page the registry's way (every
// series a const metric, as ferryd did for all formats before and still
// does for formats other than text) from 0, 10 and 1,000 in-flight jobs.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{0, 10, 1000} {
		// Once, not on each of the framework's rounds.
		tr := benchTracker(b, n)
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewCollector("bench", "bench", tr, nil))
			benchServe(b, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		})
	}
}

// BenchmarkScrapeServed is ferryd's /metrics handler with 1 and 1,000
// in-flight jobs, and the registry's way with 1,000 in the same run.
func BenchmarkScrapeServed(b *testing.B) {
	for _, c := range []struct {
		name string
		jobs int
		old  bool
	}{{"jobs=1", 1, false}, {"jobs=1000", 1000, false}, {"jobs=1000,registry", 1000, true}} {
		tr := benchTracker(b, c.jobs)
		b.Run(c.name, func(b *testing.B) {
			col := NewCollector("bench", "bench", tr, nil)
			reg := prometheus.NewRegistry()
			if c.old {
				reg.MustRegister(col)
				benchServe(b, RegistryHandler(reg, zap.NewNop()))
				return
			}
			reg.MustRegister(col.Node())
			benchServe(b, NewHandler(reg, col, zap.NewNop()))
		})
	}
}
