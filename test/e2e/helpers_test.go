//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
	"github.com/ferry-vm/ferry/test/testbed"
)

// ferry reads one node's ferryd over its debug socket through api/client,
// as ferryctl does; /metrics, which is Prometheus's, over plain HTTP.
type ferry struct {
	node string
	c    *client.Client
	hc   *http.Client
}

func ferryOn(node string) *ferry {
	sock := bed.Node(node).DebugSocket
	// No keep-alive: idle connections would hold file descriptors in ferryd
	// that the leak checks count.
	return &ferry{node: node, c: client.New(sock), hc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
}

// domains is `ferryctl domains` (with check, the check of each).
func (f *ferry) domains(check bool) (api.DomainsResponse, error) {
	return f.c.Domains(context.Background(), check)
}

// job returns the domain's latest job on this node, or ok=false.
func (f *ferry) job(domain string) (api.Job, bool) {
	j, err := f.c.Job(context.Background(), domain)
	return j, err == nil
}

// metrics returns the text exposition as lines.
func (f *ferry) metrics() []string {
	resp, err := f.hc.Get("http://ferryd/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// metric returns the value of the first series of name whose labels contain all of want.
func (f *ferry) metric(name string, want ...string) (float64, bool) {
	for _, l := range f.metrics() {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(l, w) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		return v, err == nil
	}
	return 0, false
}

// ctlJSON runs the real ferryctl against a node and decodes its JSON output.
func ctlJSON(t *testing.T, node string, v any, args ...string) {
	t.Helper()
	full := append([]string{"--socket", bed.Node(node).DebugSocket, "-o", "json"}, args...)
	out, err := exec.Command(ferryctlBin, full...).Output()
	if err != nil {
		t.Fatalf("ferryctl %v: %v", args, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("ferryctl %v printed unreadable JSON: %v\n%s", args, err, out)
	}
}

// waitFor polls cond every 100ms until it holds or the timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitJob waits until the node's job for domain satisfies cond and returns it.
func waitJob(t *testing.T, node, domain, what string, timeout time.Duration, cond func(api.Job) bool) api.Job {
	t.Helper()
	f := ferryOn(node)
	var last api.Job
	var seen bool
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if j, ok := f.job(domain); ok {
			last, seen = j, true
			if cond(j) {
				return j
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !seen {
		t.Fatalf("node %s: no job for %s after %v (waiting for %s)", node, domain, timeout, what)
	}
	t.Fatalf("node %s: job for %s never reached %s in %v; last: phase=%s mode=%s iteration=%d convergence=%s reason=%q state=%s",
		node, domain, what, timeout, last.Phase, last.Mode, last.Iteration, last.Convergence, last.FailureReason, last.DomainState)
	return last
}

// guest starts a guest on node a and destroys it (wherever it ended up) when the test ends.
// holdMiBs caps pre-copy for tests that need a migration still in flight when
// they act (kill, abort, cut, restart, switch to post-copy). A max-rate guest
// dirties 150+ MiB/s under TCG, but an uncapped loopback link may copy faster
// than that on a quick machine and converge before the test acts; a link
// slower than the guest keeps every pass pinned at the working set.
const holdMiBs = 48

func guest(t *testing.T, g testbed.GuestSpec) {
	t.Helper()
	if g.Node == "" {
		g.Node = "a"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := bed.StartGuest(ctx, g); err != nil {
		t.Fatalf("starting guest %s: %v", g.Name, err)
	}
	t.Logf("guest %s (%d MiB, dirtying %d MiB at %d MiB/s) ready in %.1fs", g.Name, g.MemoryMiB, g.DirtyMiB, g.DirtyRateMiBs, time.Since(start).Seconds())
	t.Cleanup(func() {
		if err := bed.DestroyGuest(g.Name); err != nil {
			t.Logf("destroying guest %s: %v", g.Name, err)
		}
	})
}

// migrateAsync starts a migration and returns a channel with its result.
func migrateAsync(t *testing.T, m testbed.MigrateSpec) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	go func() {
		defer cancel()
		done <- bed.Migrate(ctx, m)
	}()
	return done
}

// domainState reads a domain's state straight from a node's libvirt.
func domainState(t *testing.T, node, name string) (int32, int32) {
	t.Helper()
	l, err := bed.Libvirt(node)
	if err != nil {
		t.Fatalf("libvirt on %s: %v", node, err)
	}
	defer l.Disconnect()
	d, err := l.DomainLookupByName(name)
	if err != nil {
		t.Fatalf("lookup %s on %s: %v", name, node, err)
	}
	st, rs, err := l.DomainGetState(d, 0)
	if err != nil {
		t.Fatalf("state of %s on %s: %v", name, node, err)
	}
	return st, rs
}

// hasEvent says whether the job recorded an event of kind.
func hasEvent(j api.Job, kind string) bool {
	for _, e := range j.Events {
		if e.Kind == kind {
			return true
		}
	}
	return false
}
