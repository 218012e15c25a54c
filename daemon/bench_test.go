package daemon

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// BenchmarkScrape serves a whole /metrics page from a tracker holding 0,
// 10 and 1,000 synthetic in-flight jobs.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{0, 10, 1000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			tr := migration.NewTracker(migration.Config{Node: "bench"})
			for i := range n {
				name := fmt.Sprintf("ns%d_vm%d", i%50, i)
				d := libvirtx.Domain{Ref: libvirt.Domain{Name: name}, Name: name, State: libvirtx.StateRunning, Reason: 1}
				tr.ApplyStats("/run/libvirt/libvirt-sock", d, libvirtx.JobStats{Type: libvirtx.JobUnbounded,
					Operation: libvirtx.OperationMigrationOut, MemoryIteration: 3, DataTotal: 8 << 30, MemoryTotal: 8 << 30, DataRemaining: 1 << 30,
					MemoryBps: 1 << 30, MemoryDirtyRate: 100 << 20}, time.Now())
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewCollector("bench", "bench", tr, nil))
			h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
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
		})
	}
}
