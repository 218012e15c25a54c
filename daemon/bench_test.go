package daemon

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

func benchTracker(n int) *migration.Tracker {
	tr := migration.NewTracker(migration.Config{Node: "bench"})
	for i := range n {
		name := fmt.Sprintf("ns%d_vm%d", i%50, i)
		d := libvirtx.Domain{Ref: libvirt.Domain{Name: name}, Name: name, State: libvirtx.StateRunning, Reason: 1}
		tr.ApplyStats("/run/libvirt/libvirt-sock", d, libvirtx.JobStats{Type: libvirtx.JobUnbounded,
			Operation: libvirtx.OperationMigrationOut, MemoryIteration: 3, DataTotal: 8 << 30, MemoryTotal: 8 << 30, DataRemaining: 1 << 30,
			MemoryBps: 1 << 30, MemoryDirtyRate: 100 << 20}, time.Now())
	}
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
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewCollector("bench", "bench", benchTracker(n), nil))
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
		b.Run(c.name, func(b *testing.B) {
			col := NewCollector("bench", "bench", benchTracker(c.jobs), nil)
			reg := prometheus.NewRegistry()
			if c.old {
				reg.MustRegister(col)
				benchServe(b, metricsHandler(reg, zap.NewNop()))
				return
			}
			reg.MustRegister(nodeCollector{col})
			benchServe(b, newScrapeHandler(reg, col, zap.NewNop()))
		})
	}
}
