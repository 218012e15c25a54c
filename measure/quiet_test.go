package measure

import (
	"context"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

type oneDomain struct{ inFlight bool }

func (o oneDomain) Domains() []api.Domain {
	return []api.Domain{{Name: "vm", UUID: "u", Socket: "s", State: libvirtx.StateRunning.String()}}
}
func (o oneDomain) InFlight(string, string) bool { return o.inFlight }
func (o oneDomain) DomainRef(string, string) (string, libvirt.Domain, error) {
	return "s", libvirt.Domain{}, nil
}

// A domain about to migrate is not measured, and its migration waits for
// a measurement under way to end.
func TestQuietHoldsMeasurementsOff(t *testing.T) {
	m := New(Config{Period: time.Minute}, oneDomain{}, nil, zap.NewNop())
	now := time.Now()
	m.startDue(context.Background(), now) // first sight: staggered
	k := key{"s", "vm"}
	busy := make(chan struct{})
	m.mu.Lock()
	m.domains[k].busy = busy
	m.mu.Unlock()
	released := make(chan func())
	go func() { released <- m.Quiet(context.Background(), "s", "vm") }()
	select {
	case <-released:
		t.Fatal("Quiet returned while a measurement ran")
	case <-time.After(50 * time.Millisecond):
	}
	m.mu.Lock()
	m.domains[k].busy = nil
	m.mu.Unlock()
	close(busy)
	release := <-released
	m.mu.Lock()
	m.domains[k].due = now
	m.mu.Unlock()
	m.startDue(context.Background(), now.Add(time.Hour))
	m.mu.Lock()
	started := m.domains[k].busy != nil
	m.mu.Unlock()
	if started {
		t.Fatal("a domain held quiet was measured")
	}
	release()
	m.mu.Lock()
	held := m.domains[k].held
	m.mu.Unlock()
	if held != 0 {
		t.Fatalf("released, the domain is still held %d times", held)
	}
}

// A domain migrating is never measured, on a period or on demand.
func TestNoMeasurementWhileMigrating(t *testing.T) {
	m := New(Config{Period: time.Minute}, oneDomain{inFlight: true}, nil, zap.NewNop())
	now := time.Now()
	m.startDue(context.Background(), now)
	m.startDue(context.Background(), now.Add(time.Hour))
	m.mu.Lock()
	started := m.domains[key{"s", "vm"}].busy != nil
	m.mu.Unlock()
	if started {
		t.Fatal("a migrating domain was measured")
	}
	if _, err := m.Measure(context.Background(), "s", "vm", time.Minute); err == nil {
		t.Fatal("a migrating domain was measured on demand")
	}
}

// One domain's rate is the estimate the whole list gives it, and a domain
// never measured has none.
func TestRateIsTheDomainsEstimate(t *testing.T) {
	m := New(Config{Period: time.Minute}, oneDomain{}, nil, zap.NewNop())
	m.startDue(context.Background(), time.Now())
	if r, ok := m.Rate("s", "vm"); ok {
		t.Fatalf("a domain never measured has rate %d", r)
	}
	m.mu.Lock()
	for _, b := range []uint64{38, 17, 16, 20, 15} {
		m.domains[key{"s", "vm"}].history = append(m.domains[key{"s", "vm"}].history, api.DirtyRate{BytesPerSecond: b})
	}
	m.mu.Unlock()
	r, ok := m.Rate("s", "vm")
	if !ok || r != 17 || m.Latest()[[2]string{"s", "vm"}] != r {
		t.Fatalf("Rate = %d, %v; Latest says %d; want 17", r, ok, m.Latest()[[2]string{"s", "vm"}])
	}
	if _, ok := m.Rate("s", "other"); ok {
		t.Fatal("a domain the meter does not track has a rate")
	}
}
