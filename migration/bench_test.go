package migration

import (
	"fmt"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
)

func syntheticDomain(i int) libvirtx.Domain {
	name := fmt.Sprintf("ns%d_vm%d", i%50, i)
	return libvirtx.Domain{Ref: libvirt.Domain{Name: name, UUID: libvirt.UUID{byte(i >> 8), byte(i)}}, Name: name,
		State: libvirtx.StateRunning, Reason: 1}
}

func populated(n int) *Tracker {
	tr := NewTracker(Config{Node: "bench"})
	for i := range n {
		tr.feedStats(sock, syntheticDomain(i), outgoing(1, 400), time.Now())
	}
	return tr
}

// BenchmarkApplySample is the cost of folding one job stats reading into
// the tracker, with 1 and with 1,000 jobs in flight.
func BenchmarkApplySample(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			tr := populated(n)
			d := syntheticDomain(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tr.feedStats(sock, d, outgoing(uint64(2+i%5), 300), time.Now())
			}
		})
	}
}

// BenchmarkSnapshot is what each scrape pays to copy the tracker's state.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			tr := populated(n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tr.Snapshot()
			}
		})
	}
}
