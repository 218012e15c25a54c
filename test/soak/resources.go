package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// usage is one ferryd's footprint at a moment of rest.
type usage struct {
	PID    int
	RSSKiB int64
	// LiveHeap is the Go heap's bytes in use right after a collection.
	LiveHeap   int64
	FDs        int
	Goroutines int
	After      string
}

func (u usage) String() string {
	return fmt.Sprintf("pid %d: live heap %.1f MiB (RSS %.1f MiB), %d fds, %d goroutines", u.PID, mib(u.LiveHeap), float64(u.RSSKiB)/1024, u.FDs, u.Goroutines)
}

// usageBook keeps each ferryd's footprint at every rest. A ferryd's
// baseline is its first footprint after it has lived through a whole
// stretch of migrating (for the bed's first ferryds, the first fault's);
// one restarted by a fault gets a baseline of its own a fault later.
type usageBook struct {
	mu sync.Mutex
	// pidAtOpen is each node's ferryd when the gate last opened.
	pidAtOpen map[string]int
	baseline  map[string]usage
	series    map[string][]usage
	errs      []string
}

func newUsageBook() *usageBook {
	return &usageBook{pidAtOpen: map[string]int{}, baseline: map[string]usage{}, series: map[string][]usage{}}
}

func (b *usageBook) gateOpened(bed *testbed.Bed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range nodes {
		b.pidAtOpen[n] = bed.FerrydPID(n)
	}
}

// sample reads both ferryds' footprints, a few seconds into the rest so
// that the connections and goroutines of the migrations just ended are
// gone.
func (b *usageBook) sample(bed *testbed.Bed, after string) {
	time.Sleep(2 * time.Second)
	for _, n := range nodes {
		u, err := readUsage(bed, n)
		b.mu.Lock()
		if err != nil {
			b.errs = append(b.errs, fmt.Sprintf("after %s, node %s: %v", after, n, err))
			b.mu.Unlock()
			continue
		}
		u.After = after
		b.series[n] = append(b.series[n], u)
		if _, ok := b.baseline[n]; (!ok || b.baseline[n].PID != u.PID) && b.pidAtOpen[n] == u.PID {
			b.baseline[n] = u
		}
		b.mu.Unlock()
	}
}

func readUsage(bed *testbed.Bed, node string) (usage, error) {
	u := usage{PID: bed.FerrydPID(node)}
	if u.PID == 0 {
		return u, fmt.Errorf("no ferryd runs")
	}
	live, err := liveHeap(bed.Node(node).DebugSocket)
	if err != nil {
		return u, err
	}
	u.LiveHeap = live
	rss, err := vmRSS(u.PID)
	if err != nil {
		return u, err
	}
	u.RSSKiB = rss
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", u.PID))
	if err != nil {
		return u, err
	}
	u.FDs = len(fds)
	g, err := metric(bed.Node(node).DebugSocket, "go_goroutines")
	if err != nil {
		return u, err
	}
	u.Goroutines = int(g)
	return u, nil
}

// vmRSS is the process's resident set, KiB.
func vmRSS(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// liveHeap has ferryd collect its garbage and says how many bytes its
// heap holds then: what a leak grows. Its RSS is no measure of that, as
// Go keeps the pages of a cycle's peak for minutes after it.
func liveHeap(socket string) (int64, error) {
	body, err := get(socket, "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("ferryd's heap profile has no HeapAlloc")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// metric reads one unlabelled series from ferryd's /metrics, which its
// debug socket serves too.
func metric(socket, name string) (float64, error) {
	body, err := get(socket, "/metrics")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// get is one GET on ferryd's debug socket.
func get(socket, path string) (string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// No keep-alive: an idle connection would be one more descriptor
		// in the ferryd being counted.
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	resp, err := hc.Get("http://ferryd" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), nil
}

// growthLimit is how much a ferryd's footprint may grow over the run
// from its baseline: 10 %, and for counts at least 2, as one descriptor
// more of 20 is no leak; for the live heap at least heapSlack.
const growthLimit = 0.10

// heapSlack is the live heap's growth no run is failed for: a heap of a
// few MiB moves by a tenth with what is in flight at the collection (one
// relay's buffer is 256 KiB) and with the bounded histories a short run
// is still filling, while a leak of a few KiB per migration outgrows it
// within the 2-hour run.
const heapSlack = 1.0

// compare says, for each node, how the last footprint stands to the
// baseline, and what grew past the limit.
func (b *usageBook) compare() (lines, grew []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range nodes {
		s := b.series[n]
		for _, u := range s {
			lines = append(lines, fmt.Sprintf("  node %s after %s: %s", n, u.After, u))
		}
		if len(s) == 0 {
			lines = append(lines, fmt.Sprintf("  node %s: no footprint read", n))
			continue
		}
		last := s[len(s)-1]
		base, ok := b.baseline[n]
		if !ok || base.PID != last.PID {
			lines = append(lines, fmt.Sprintf("  node %s: its ferryd (pid %d) was started by the last fault: nothing to compare it with", n, last.PID))
			continue
		}
		if base.After == last.After {
			lines = append(lines, fmt.Sprintf("  node %s: one footprint of its ferryd only (pid %d): nothing to compare", n, last.PID))
			continue
		}
		check := func(what string, from, to float64, minSlack float64) {
			limit := from + math.Max(from*growthLimit, minSlack)
			verdict := "within"
			if to > limit {
				verdict = "PAST"
				grew = append(grew, fmt.Sprintf("node %s: ferryd's %s grew from %.1f to %.1f (pid %d, from after %s to after %s), past %.0f %%", n, what, from, to, last.PID, base.After, last.After, growthLimit*100))
			}
			lines = append(lines, fmt.Sprintf("  node %s: %s %.1f -> %.1f (%+.1f %%), %s the limit", n, what, from, to, pct(from, to), verdict))
		}
		check("live heap (MiB)", mib(base.LiveHeap), mib(last.LiveHeap), heapSlack)
		lines = append(lines, fmt.Sprintf("  node %s: RSS %.1f -> %.1f MiB (%+.1f %%), shown only: it keeps a collection cycle's peak", n, float64(base.RSSKiB)/1024, float64(last.RSSKiB)/1024, pct(float64(base.RSSKiB), float64(last.RSSKiB))))
		check("open fds", float64(base.FDs), float64(last.FDs), 2)
		check("goroutines", float64(base.Goroutines), float64(last.Goroutines), 2)
	}
	for _, e := range b.errs {
		lines = append(lines, "  could not read: "+e)
	}
	return lines, grew
}

func pct(from, to float64) float64 {
	if from == 0 {
		return 0
	}
	return (to - from) / from * 100
}
