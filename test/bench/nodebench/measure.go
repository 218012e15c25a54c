package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/test/bench/benchstat"
	"github.com/ferry-vm/ferry/test/testbed"
)

// env is what every count is measured with.
type env struct {
	b     *testbed.Bed
	node  string
	f     *ferryd
	fleet *fleet
	o     options
	stamp string
}

// countResult is one launcher count's figures. Pointers are nil where a
// figure does not exist at that count (per launcher at 0), or where no
// probe or scrape succeeded.
type countResult struct {
	Launchers int `json:"launchers"`
	// StartSeconds is how long starting the launchers added since the
	// previous count took, and SeenSeconds how long after that ferryd
	// listed them all.
	StartSeconds float64 `json:"startSeconds"`
	// StartsRetried counts the launchers added that started only at a
	// second attempt: a sign of a machine at its limit.
	StartsRetried int     `json:"startsRetried"`
	SeenSeconds   float64 `json:"seenSeconds"`
	WindowSeconds float64 `json:"windowSeconds"`

	CPUPercentCore float64 `json:"cpuPercentCore"`
	RSSMiB         float64 `json:"rssMiB"`
	FDs            int     `json:"fds"`
	Threads        int     `json:"threads"`
	Goroutines     float64 `json:"goroutines"`

	CallsPerSecond         float64  `json:"libvirtCallsPerSecond"`
	CallsPerLauncherSecond *float64 `json:"libvirtCallsPerLauncherSecond"`
	TopOps                 []opRate `json:"topOps"`

	Probes []probeResult `json:"probes"`
	// ProbesRetried counts probes whose launcher started only at a second
	// attempt (see fleet.grow); the first attempt is not timed.
	ProbesRetried int `json:"probesRetried"`
	// SeenMedianMs is the probes' median from the socket's appearing to
	// the debug API listing it up; FerrydUpMedianMs to the moment ferryd
	// itself recorded it up (its status's since).
	SeenMedianMs     *float64 `json:"seenMedianMs"`
	FerrydUpMedianMs *float64 `json:"ferrydUpMedianMs"`

	ScrapeMs       []float64 `json:"scrapeMs"`
	ScrapeMedianMs float64   `json:"scrapeMedianMs"`
	PageBytes      int       `json:"pageBytes"`

	// The machine over the same window: whether it, and not ferryd, is
	// what bounds the count.
	HostBusyPercent         float64 `json:"hostBusyPercent"`
	LaunchersCPUPercentCore float64 `json:"launchersCpuPercentCore"`
	MemAvailableMiB         float64 `json:"memAvailableMiB"`
}

// opRate is one libvirt operation's calls per second over the window.
type opRate struct {
	Op      string  `json:"op"`
	PerSec  float64 `json:"perSecond"`
	Percent float64 `json:"percentOfCalls"`
}

// probeResult is one launcher timed from its socket's appearing to
// ferryd having it up.
type probeResult struct {
	SeenMs     float64 `json:"seenMs"`
	FerrydUpMs float64 `json:"ferrydUpMs"`
}

func measureCount(ctx context.Context, e *env, n int) (countResult, error) {
	r := countResult{Launchers: n}
	t0 := time.Now()
	retried := e.fleet.retries()
	err := e.fleet.grow(ctx, n)
	r.StartsRetried = e.fleet.retries() - retried
	if err != nil {
		return r, err
	}
	r.StartSeconds = time.Since(t0).Seconds()
	t1 := time.Now()
	// Two minutes and a second a launcher: ferryd connects to each in
	// turn, and a machine full of TCG guests is slow to answer.
	if err := e.f.waitSeen(ctx, e.fleet.launchers(), 2*time.Minute+time.Duration(n)*time.Second); err != nil {
		return r, err
	}
	r.SeenSeconds = time.Since(t1).Seconds()
	logf("%d launchers: all seen by ferryd %.1f s after the last started; settling %v", n, r.SeenSeconds, e.o.settle)
	if err := sleepCtx(ctx, e.o.settle); err != nil {
		return r, err
	}
	if err := window(ctx, e, &r); err != nil {
		return r, err
	}
	if err := scrapes(ctx, e, &r); err != nil {
		return r, err
	}
	for i := 1; i <= e.o.probes; i++ {
		p, err := probe(ctx, e, n, i)
		if se := (*startError)(nil); errors.As(err, &se) && ctx.Err() == nil {
			// As in fleet.grow: the bed's first dial can come too early.
			logf("%d launchers: probe %d's launcher did not start, once more: %v", n, i, err)
			r.ProbesRetried++
			p, err = probe(ctx, e, n, i)
		}
		if err != nil {
			return r, fmt.Errorf("probe %d at %d launchers: %w", i, n, err)
		}
		r.Probes = append(r.Probes, p)
		logf("%d launchers: probe %d seen %.0f ms after its socket appeared (ferryd's own record: %.0f ms)", n, i, p.SeenMs, p.FerrydUpMs)
	}
	if len(r.Probes) > 0 {
		var seen, up []float64
		for _, p := range r.Probes {
			seen, up = append(seen, p.SeenMs), append(up, p.FerrydUpMs)
		}
		r.SeenMedianMs, r.FerrydUpMedianMs = ptr(benchstat.Of(seen).Median), ptr(benchstat.Of(up).Median)
	}
	return r, e.f.alive(e.b, e.node)
}

// window reads ferryd from the kernel and its page at both ends of the
// window, and the machine with it. Nothing else of the bench talks to
// ferryd meanwhile.
func window(ctx context.Context, e *env, r *countResult) error {
	ls := e.fleet.launchers()
	m0, _, err := e.f.scrape(ctx)
	if err != nil {
		return err
	}
	p0, err := readProc(e.f.pid)
	if err != nil {
		return err
	}
	h0, err := readHost()
	if err != nil {
		return err
	}
	pids := launcherPIDs(ls)
	l0 := ticksOf(pids)
	logf("%d launchers: measuring for %v", len(ls), e.o.window)
	if err := sleepCtx(ctx, e.o.window); err != nil {
		return err
	}
	l1 := ticksOf(pids)
	h1, err := readHost()
	if err != nil {
		return err
	}
	p1, err := readProc(e.f.pid)
	if err != nil {
		return err
	}
	m1, _, err := e.f.scrape(ctx)
	if err != nil {
		return err
	}
	secs := p1.At.Sub(p0.At).Seconds()
	r.WindowSeconds = secs
	r.CPUPercentCore = cpuPercentCore(p0, p1)
	r.RSSMiB = float64(p1.RSSKiB) / 1024
	r.FDs, r.Threads = p1.FDs, p1.Threads
	r.Goroutines = m1.Goroutines
	r.CallsPerSecond = (m1.totalCalls() - m0.totalCalls()) / secs
	if r.Launchers > 0 {
		r.CallsPerLauncherSecond = ptr(r.CallsPerSecond / float64(r.Launchers))
	}
	r.TopOps = topOps(m0.Calls, m1.Calls, secs, 3)
	r.HostBusyPercent = busyPercent(h0, h1)
	r.LaunchersCPUPercentCore = float64(l1-l0) / userHZ / secs * 100
	r.MemAvailableMiB = float64(h1.MemAvailableKiB) / 1024
	return nil
}

// launcherPIDs are each launcher's libvirt daemon and QEMU: the pod's
// processes that run for the whole window.
func launcherPIDs(ls []*testbed.Launcher) []int {
	var pids []int
	for _, l := range ls {
		if pid := l.PID(); pid > 0 {
			pids = append(pids, pid)
		}
		if pid, err := l.QEMUPID(); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ticksOf sums the CPU of the processes still there; one gone since
// (none should) counts for nothing at either end.
func ticksOf(pids []int) uint64 {
	var sum uint64
	for _, pid := range pids {
		if s, err := readProc(pid); err == nil {
			sum += s.Ticks
		}
	}
	return sum
}

// topOps are the k operations called most over the window, by rate.
func topOps(before, after map[string]float64, secs float64, k int) []opRate {
	var out []opRate
	var total float64
	for op, n := range after {
		if d := n - before[op]; d > 0 {
			out = append(out, opRate{Op: op, PerSec: d / secs})
			total += d / secs
		}
	}
	slices.SortFunc(out, func(a, b opRate) int {
		if a.PerSec != b.PerSec {
			if a.PerSec > b.PerSec {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Op, b.Op)
	})
	for i := range out {
		out[i].Percent = out[i].PerSec / total * 100
	}
	return out[:min(k, len(out))]
}

// scrapes times GETs of /metrics one after another, after one that is
// not counted: it opens the connection the others reuse.
func scrapes(ctx context.Context, e *env, r *countResult) error {
	p, _, err := e.f.scrape(ctx)
	if err != nil {
		return err
	}
	r.PageBytes = p.Bytes
	for range e.o.scrapes {
		_, took, err := e.f.scrape(ctx)
		if err != nil {
			return err
		}
		r.ScrapeMs = append(r.ScrapeMs, float64(took.Microseconds())/1000)
	}
	r.ScrapeMedianMs = benchstat.Of(r.ScrapeMs).Median
	return nil
}

// probe starts one launcher with no guest, its daemon and socket alone,
// as KubeVirt starts a migration's target pod, and times it from its
// socket's appearing (polled every 5 ms) to ferryd's debug API listing
// it up (polled every 10 ms: often enough for a 1 s goal, seldom enough
// not to busy ferryd itself). Then it stops it again.
func probe(ctx context.Context, e *env, count, i int) (probeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	pod := uuid.NewString()
	inNode := strings.Replace(libvirtx.KubeVirtSocketGlob(podsInNode), "*", pod, 1)
	onHost := strings.Replace(libvirtx.KubeVirtSocketGlob(hostPodsDir(e.b, e.node)), "*", pod, 1)
	var l *testbed.Launcher
	var startErr error
	started := make(chan struct{})
	go func() {
		defer close(started)
		l, startErr = e.b.StartLauncher(ctx, testbed.LauncherSpec{
			Node: e.node, Namespace: namespace, Name: fmt.Sprintf("p%s-%03d-%d", e.stamp, count, i),
			VMIUID: uuid.NewString(), PodUID: pod,
		})
	}()
	// Stopped however the probe ends: a probe left behind would count
	// in every later figure.
	defer func() {
		<-started
		if l != nil {
			if err := l.Stop(); err != nil {
				logf("stopping probe launcher %s: %v", l.PodUID, err)
			}
		}
	}()
	appeared, err := socketAppeared(ctx, onHost)
	if err != nil {
		return probeResult{}, err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	// The bed returns once its own client has the daemon's capabilities,
	// which may be before or after ferryd has it up: only a failure to
	// start ends the probe early.
	pending := started
	for {
		if w, err := e.f.watched(ctx); err == nil {
			if s, up := w.up[inNode]; up {
				pr := probeResult{SeenMs: msSince(appeared, time.Now()), FerrydUpMs: msSince(appeared, s.Since)}
				<-started
				if startErr != nil {
					return pr, &startError{startErr}
				}
				if l.Socket != inNode {
					return pr, fmt.Errorf("the bed put launcher %s's socket at %s, not at %s where the bench looked (has the bed's layout changed?)", pod, l.Socket, inNode)
				}
				return pr, nil
			}
		}
		select {
		case <-pending:
			if startErr != nil {
				return probeResult{}, &startError{startErr}
			}
			pending = nil
		case <-ctx.Done():
			return probeResult{}, fmt.Errorf("ferryd never listed launcher %s's socket up: %w", pod, ctx.Err())
		case <-tick.C:
		}
	}
}

// startError is a probe's launcher that did not start, as opposed to
// one ferryd did not see.
type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

func msSince(from, to time.Time) float64 { return float64(to.Sub(from).Microseconds()) / 1000 }

func ptr(x float64) *float64 { return &x }
