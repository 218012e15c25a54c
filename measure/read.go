package measure

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// Quiet keeps the domain from being measured until release is called,
// and waits for a measurement under way to end: a migration about to
// start must not run beside one.
func (m *Meter) Quiet(ctx context.Context, socket, domain string) (release func()) {
	k := key{socket, domain}
	m.mu.Lock()
	st := m.domains[k]
	if st == nil {
		st = &tracked{due: time.Now().Add(m.cfg.Period)}
		m.domains[k] = st
	}
	st.held++
	busy := st.busy
	m.mu.Unlock()
	if busy != nil {
		select {
		case <-busy:
		case <-ctx.Done():
		}
	}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if st.held--; st.held == 0 {
			st.due = time.Now().Add(m.cfg.Period)
		}
	}
}

// Measure returns the domain's last measurement if it is younger than
// maxAge, and otherwise the one under way, or one taken now; it measures
// at most once, whatever the measurement takes.
func (m *Meter) Measure(ctx context.Context, socket, domain string, maxAge time.Duration) (api.DirtyRate, error) {
	k := key{socket, domain}
	m.mu.Lock()
	st := m.domains[k]
	if st == nil {
		st = &tracked{}
		m.domains[k] = st
	}
	if n := len(st.history); n > 0 && time.Since(st.history[n-1].Time) <= maxAge {
		r := st.history[n-1]
		m.mu.Unlock()
		return r, nil
	}
	busy := st.busy
	switch {
	case st.held > 0 || m.doms.InFlight(socket, domain):
		m.mu.Unlock()
		return api.DirtyRate{}, fmt.Errorf("%s is migrating: its dirty rate is not measured meanwhile", domain)
	case busy == nil:
		st.busy = make(chan struct{})
		m.running++
		m.mu.Unlock()
		m.measure(ctx, k)
	default:
		m.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return api.DirtyRate{}, ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.lastError != "" {
		return api.DirtyRate{}, fmt.Errorf("measuring the dirty rate of %s: %s", domain, st.lastError)
	}
	if n := len(st.history); n > 0 {
		return st.history[n-1], nil
	}
	return api.DirtyRate{}, fmt.Errorf("%s has no dirty-rate measurement", domain)
}

// Annotate adds each domain's measurements and memory to a listing.
func (m *Meter) Annotate(doms []api.Domain) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range doms {
		if st := m.domains[key{doms[i].Socket, doms[i].Name}]; st != nil && st.uuid == doms[i].UUID {
			doms[i].DirtyRates = slices.Clone(st.history)
			doms[i].DirtyBytesPerSecond = Estimate(st.history)
			doms[i].MemoryBytes, doms[i].ResidentBytes = st.memory, st.resident
		}
	}
}

// estimateOf is how many of the last measurements a rate is the median of.
const estimateOf = 5

// Estimate is the guest's dirty rate from its measurements: the median of
// the last few. Under TCG QEMU can only sample pages, a few hundred per
// GiB: one second's figure of a guest dirtying 8 MiB/s was seen anywhere
// from 2 to 13, and a guest catching up after a busy moment writes at
// twice its rate for a while.
func Estimate(history []api.DirtyRate) uint64 {
	last := history[max(0, len(history)-estimateOf):]
	if len(last) == 0 {
		return 0
	}
	rates := make([]uint64, len(last))
	for i, r := range last {
		rates[i] = r.BytesPerSecond
	}
	slices.Sort(rates)
	if n := len(rates); n%2 == 0 {
		return (rates[n/2-1] + rates[n/2]) / 2
	}
	return rates[len(rates)/2]
}

// Latest is each domain's dirty rate (Estimate) in bytes per second, by
// socket and domain name.
func (m *Meter) Latest() map[[2]string]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[[2]string]uint64{}
	for k, st := range m.domains {
		if n := len(st.history); n > 0 {
			out[[2]string{k.socket, k.domain}] = Estimate(st.history)
		}
	}
	return out
}

// Rate is one domain's dirty rate (Estimate) in bytes per second, and
// whether it was ever measured.
func (m *Meter) Rate(socket, domain string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.domains[key{socket, domain}]
	if st == nil || len(st.history) == 0 {
		return 0, false
	}
	return Estimate(st.history), true
}
