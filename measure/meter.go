package measure

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"
	"libvirt.org/go/libvirtxml"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/peertext"
	"github.com/ferry-vm/ferry/libvirtx"
)

// Config is how often and how many at once.
type Config struct {
	// Period between two measurements of a domain (default 5 min).
	Period time.Duration
	// Sample is how long one measurement watches the guest (default 1 s).
	Sample time.Duration
	// Concurrent bounds the domains measured at once (default 4), so a
	// node of 200 domains never has them all measured together.
	Concurrent int
	// History is how many measurements each domain keeps (default 12).
	History int
}

func (c Config) withDefaults() Config {
	if c.Period <= 0 {
		c.Period = 5 * time.Minute
	}
	if c.Sample <= 0 {
		c.Sample = time.Second
	}
	if c.Concurrent <= 0 {
		c.Concurrent = 4
	}
	if c.History <= 0 {
		c.History = 12
	}
	return c
}

// Domains is what the meter reads of the node; *migration.Tracker is one.
type Domains interface {
	Domains() []api.Domain
	InFlight(socket, domain string) bool
	DomainRef(socket, domain string) (string, libvirt.Domain, error)
}

// Conns gives the libvirt connection of a socket; *libvirtx.Pool is one.
type Conns interface {
	Conn(socket string) (*libvirtx.Conn, error)
}

type key struct{ socket, domain string }

// tracked is what the meter keeps of one domain.
type tracked struct {
	uuid    string
	due     time.Time
	history []api.DirtyRate
	// mode is the best way of measuring this guest that QEMU took; empty
	// until it is known.
	mode      libvirtx.DirtyRateMode
	memory    uint64
	resident  uint64
	hugepages bool
	lastError string
	// busy is closed when the measurement under way ends; held counts
	// migrations that asked for quiet.
	busy chan struct{}
	held int
}

// Meter measures the dirty rate of every running domain on the node.
type Meter struct {
	cfg   Config
	doms  Domains
	conns Conns
	log   *zap.Logger

	mu      sync.Mutex
	domains map[key]*tracked
	running int
}

func New(cfg Config, doms Domains, conns Conns, log *zap.Logger) *Meter {
	return &Meter{cfg: cfg.withDefaults(), doms: doms, conns: conns, log: log, domains: map[key]*tracked{}}
}

// Run measures domains as they come due until ctx ends.
func (m *Meter) Run(ctx context.Context) {
	tick := time.NewTicker(m.cfg.Sample)
	defer tick.Stop()
	for {
		m.startDue(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stagger spreads domains' first measurements over up to a minute, by
// their UUID, so a ferryd starting beside many domains does not measure
// them in one burst.
func (m *Meter) stagger(uuid string) time.Duration {
	h := fnv.New32a()
	h.Write([]byte(uuid))
	span := min(m.cfg.Period, time.Minute)
	return time.Duration(h.Sum32()) % span
}

// startDue starts the measurements that are due, most overdue first, up
// to the bound.
func (m *Meter) startDue(ctx context.Context, now time.Time) {
	seen := map[key]bool{}
	var due []key
	m.mu.Lock()
	for _, d := range m.doms.Domains() {
		k := key{d.Socket, d.Name}
		seen[k] = true
		st := m.domains[k]
		switch {
		case st == nil || st.uuid != "" && st.uuid != d.UUID && st.busy == nil && st.held == 0:
			// New, or another guest of the name since.
			st = &tracked{uuid: d.UUID, due: now.Add(m.stagger(d.UUID))}
			m.domains[k] = st
		case st.uuid == "":
			st.uuid = d.UUID
		}
		if d.State == libvirtx.StateRunning.String() && st.busy == nil && st.held == 0 && !now.Before(st.due) {
			due = append(due, k)
		}
	}
	for k, st := range m.domains {
		if !seen[k] && st.busy == nil && st.held == 0 {
			delete(m.domains, k)
		}
	}
	slices.SortFunc(due, func(a, b key) int { return m.domains[a].due.Compare(m.domains[b].due) })
	var start []key
	for _, k := range due {
		if m.running >= m.cfg.Concurrent {
			break
		}
		if m.doms.InFlight(k.socket, k.domain) {
			// Measuring would slow the migration down, and read its
			// copying as the guest's writing (kubevirt#17504).
			m.domains[k].due = now.Add(m.cfg.Period)
			continue
		}
		m.domains[k].busy = make(chan struct{})
		m.running++
		start = append(start, k)
	}
	m.mu.Unlock()
	for _, k := range start {
		go m.measure(ctx, k)
	}
}

// measure takes one measurement of k and records it.
func (m *Meter) measure(ctx context.Context, k key) {
	r, mem, resident, mode, err := m.take(ctx, k)
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.running--
	st := m.domains[k]
	if st == nil {
		return
	}
	close(st.busy)
	st.busy = nil
	st.due = now.Add(m.cfg.Period)
	st.mode = mode
	if mem > 0 {
		st.memory, st.resident = mem, resident
	}
	if err != nil {
		// A launcher's libvirt is a pod's: its words are bounded.
		st.lastError = peertext.Quote(err.Error(), maxErrorText)
		m.log.Debug("dirty rate not measured", zap.String("domain", k.domain), zap.Error(err))
		return
	}
	st.lastError = ""
	st.history = append(st.history, r)
	if over := len(st.history) - m.cfg.History; over > 0 {
		st.history = slices.Delete(st.history, 0, over)
	}
}

// maxErrorText bounds the error kept of a domain's last measurement.
const maxErrorText = 512

// errMigrated: a migration began while the guest was measured, whose
// copying the figure may hold.
var errMigrated = errors.New("a migration began during the measurement")

func (m *Meter) take(ctx context.Context, k key) (r api.DirtyRate, mem, resident uint64, mode libvirtx.DirtyRateMode, err error) {
	m.mu.Lock()
	mode, huge := m.domains[k].mode, m.domains[k].hugepages
	m.mu.Unlock()
	socket, ref, err := m.doms.DomainRef(k.socket, k.domain)
	if err != nil {
		return api.DirtyRate{}, 0, 0, mode, err
	}
	conn, err := m.conns.Conn(socket)
	if err != nil {
		return api.DirtyRate{}, 0, 0, mode, err
	}
	if mem, err = conn.MemoryBytes(ctx, ref); err != nil {
		return api.DirtyRate{}, 0, 0, mode, err
	}
	// What the guest has touched: the resident part of its RAM's own
	// mapping, else QEMU's whole resident set (its own memory too), which
	// libvirt gives without a balloon driver in the guest.
	resident, err = residentOf(socket, k.domain, mem)
	if err != nil {
		resident, _ = conn.ResidentBytes(ctx, ref)
	}
	if mode == "" {
		if mode, huge, err = bestMode(ctx, conn, ref); err != nil {
			return api.DirtyRate{}, mem, resident, mode, err
		}
		m.mu.Lock()
		m.domains[k].hugepages = huge
		m.mu.Unlock()
	}
	if huge {
		// Not what the guest holds: unknown, and the whole of its memory
		// is taken to go.
		resident = 0
	}
	at := time.Now()
	err = conn.StartDirtyRate(ctx, ref, m.cfg.Sample, mode)
	if err != nil && mode != libvirtx.DirtyRatePageSampling {
		// KVM's dirty log may be taken (or the ring off): sampling pages
		// needs nothing of it.
		mode = libvirtx.DirtyRatePageSampling
		err = conn.StartDirtyRate(ctx, ref, m.cfg.Sample, mode)
	}
	if err != nil {
		return api.DirtyRate{}, mem, resident, mode, err
	}
	wait := time.NewTimer(m.cfg.Sample)
	defer wait.Stop()
	for deadline := at.Add(m.cfg.Sample + 10*time.Second); ; {
		select {
		case <-ctx.Done():
			return api.DirtyRate{}, mem, resident, mode, ctx.Err()
		case <-wait.C:
		}
		got, err := conn.DirtyRate(ctx, ref)
		switch {
		case err != nil:
			return api.DirtyRate{}, mem, resident, mode, err
		case got.Measured && !got.Measuring:
			if m.doms.InFlight(k.socket, k.domain) {
				return api.DirtyRate{}, mem, resident, mode, errMigrated
			}
			return api.DirtyRate{Time: at, BytesPerSecond: got.BytesPerSecond, Mode: string(got.Mode), PeriodSeconds: int(got.Period / time.Second)}, mem, resident, mode, nil
		case time.Now().After(deadline):
			return api.DirtyRate{}, mem, resident, mode, errors.New("QEMU did not finish measuring the dirty rate")
		}
		wait.Reset(200 * time.Millisecond)
	}
}

// bestMode is how to measure the guest: KVM's dirty ring if the guest
// runs with it, else sampling pages, which only reads memory. KVM's dirty
// log would be exact, but it write-protects all of the guest's memory and
// splits its huge pages, every period on every guest. hugepages says the
// guest's memory is in huge pages, which QEMU's resident set leaves out.
func bestMode(ctx context.Context, conn *libvirtx.Conn, ref libvirt.Domain) (mode libvirtx.DirtyRateMode, hugepages bool, err error) {
	x, err := conn.DomainXML(ctx, ref)
	if err != nil {
		return "", false, err
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return "", false, err
	}
	hugepages = d.MemoryBacking != nil && d.MemoryBacking.MemoryHugePages != nil
	if d.Type == "kvm" && d.Features != nil && d.Features.KVM != nil && d.Features.KVM.DirtyRing != nil && d.Features.KVM.DirtyRing.State == "on" {
		return libvirtx.DirtyRateRing, hugepages, nil
	}
	return libvirtx.DirtyRatePageSampling, hugepages, nil
}

func residentOf(socket, domain string, mem uint64) (uint64, error) {
	pid, err := libvirtx.QEMUPID(socket, domain)
	if err != nil {
		return 0, err
	}
	return guestResident(pid, mem)
}
