//go:build e2e

package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// scrapes polls GET /metrics on nodes every 200 ms, as an impatient
// Prometheus would, for as long as a test breaks things underneath.
type scrapes struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	n    map[string]int
	bad  []string
}

func pollMetrics(t *testing.T, nodes ...string) *scrapes {
	t.Helper()
	s := &scrapes{stop: make(chan struct{}), n: map[string]int{}}
	for _, node := range nodes {
		f := ferryOn(node)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-s.stop:
					return
				case <-tick.C:
				}
				problem := ""
				resp, err := f.hc.Get("http://ferryd/metrics")
				if err != nil {
					problem = err.Error()
				} else {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch {
					case rerr != nil:
						problem = "reading the body: " + rerr.Error()
					case resp.StatusCode != http.StatusOK:
						problem = resp.Status + ": " + strings.TrimSpace(string(body))
					case len(body) == 0:
						problem = "200 with an empty body"
					}
				}
				s.mu.Lock()
				s.n[node]++
				if problem != "" && len(s.bad) < 20 {
					s.bad = append(s.bad, time.Now().Format("15:04:05.000")+" node "+node+": "+problem)
				}
				s.mu.Unlock()
			}
		}()
	}
	t.Cleanup(s.halt)
	return s
}

func (s *scrapes) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// check stops the polling and fails the test on any scrape that was not a
// 200 with a body.
func (s *scrapes) check(t *testing.T) {
	t.Helper()
	s.halt()
	s.mu.Lock()
	defer s.mu.Unlock()
	for node, n := range s.n {
		if n < 5 {
			t.Errorf("only %d scrapes of node %s happened", n, node)
		}
	}
	if len(s.bad) > 0 {
		t.Errorf("/metrics failed %d time(s) while the migration broke:\n%s", len(s.bad), strings.Join(s.bad, "\n"))
	}
	t.Logf("/metrics answered 200 with a body on every scrape: %v", s.n)
}

// metricSum adds up every series of name whose labels contain all of want.
func metricSum(node, name string, want ...string) float64 {
	var sum float64
	for _, l := range ferryOn(node).metrics() {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64); ok && err == nil {
			sum += v
		}
	}
	return sum
}

func completedTotals() map[string]float64 {
	return map[string]float64{
		"a": metricSum("a", "ferry_migrations_total", `result="completed"`),
		"b": metricSum("b", "ferry_migrations_total", `result="completed"`),
	}
}

// A guest that dirties memory as fast as its vCPU can never converges in
// pre-copy here (see the convergence test): the migration stays "mid" for
// as long as a test needs.
func hotGuest(t *testing.T, name string) {
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0})
}

var stoppedReason = regexp.MustCompile(`(?i)stop|crash|died|dead|exit|kill|not running`)

func TestSourceQEMUKilledMidPreCopyIsNotCompleted(t *testing.T) {
	hotGuest(t, "srckill")
	before := completedTotals()
	scr := pollMetrics(t, "a", "b")
	since := time.Now()
	// Through the bed's relays: Ferry only watches, as under KubeVirt, so
	// the outcome is what its tracker makes of libvirt alone.
	done := migrateAsync(t, testbed.MigrateSpec{Name: "srckill", From: "a", To: "b", Via: "socat", BandwidthMiBs: holdMiBs})
	waitJob(t, "a", "srckill", "iteration 2", 2*time.Minute, func(j api.Job) bool { return j.Iteration >= 2 })
	waitJob(t, "b", "srckill", "the target job", 10*time.Second, func(j api.Job) bool { return j.Role == api.RoleTarget })
	if err := bed.KillQEMU("a", "srckill"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Logf("migrate call returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Error("migrate call still blocked 30s after the source QEMU died")
	}
	src := waitJob(t, "a", "srckill", "the source job to end", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	dst := waitJob(t, "b", "srckill", "the target job to end", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	t.Logf("source: %s (%s); target: %s (%s)", src.Phase, src.FailureReason, dst.Phase, dst.FailureReason)
	assertClass(t, src, api.PlaneGuest, api.ClassGuestStopped)
	if src.Phase != api.PhaseFailed {
		t.Errorf("source job %s, want Failed: its QEMU was killed mid pre-copy (reason %q)", src.Phase, src.FailureReason)
	} else if !stoppedReason.MatchString(src.FailureReason) {
		t.Errorf("source job's reason does not say the domain stopped or crashed: %q", src.FailureReason)
	}
	if dst.Phase != api.PhaseFailed {
		t.Errorf("target job %s, want Failed (reason %q)", dst.Phase, dst.FailureReason)
	}
	o := assertTruth(t, "srckill", "a", "b", since)
	if o.TSrc.Present || o.TDst.Present {
		t.Errorf("libvirt still has the domain after its source QEMU died: source %s, target %s", o.TSrc, o.TDst)
	}
	if after := completedTotals(); after["a"] != before["a"] || after["b"] != before["b"] {
		t.Errorf("ferry_migrations_total{result=completed} grew: before %v, after %v", before, after)
	}
	scr.check(t)
}

func TestTargetQEMUKilledMidPreCopyFailsAndSourceRuns(t *testing.T) {
	hotGuest(t, "dstkill")
	before := completedTotals()
	scr := pollMetrics(t, "a", "b")
	since := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: "dstkill", From: "a", To: "b", Via: "socat", BandwidthMiBs: holdMiBs})
	waitJob(t, "a", "dstkill", "iteration 2", 2*time.Minute, func(j api.Job) bool { return j.Iteration >= 2 })
	waitJob(t, "b", "dstkill", "the target job", 10*time.Second, func(j api.Job) bool { return j.Role == api.RoleTarget })
	if err := bed.KillQEMU("b", "dstkill"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the migrate call reported success after the target QEMU died")
		}
		t.Logf("migrate call returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Error("migrate call still blocked 30s after the target QEMU died")
	}
	src := waitJob(t, "a", "dstkill", "the source job to end", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	dst := waitJob(t, "b", "dstkill", "the target job to end", 15*time.Second, func(j api.Job) bool { return j.Phase.Finished() })
	t.Logf("source: %s (%s); target: %s (%s)", src.Phase, src.FailureReason, dst.Phase, dst.FailureReason)
	if src.Phase != api.PhaseFailed {
		t.Errorf("source job %s, want Failed (reason %q)", src.Phase, src.FailureReason)
	}
	if dst.Phase != api.PhaseFailed {
		t.Errorf("target job %s, want Failed (reason %q)", dst.Phase, dst.FailureReason)
	}
	o := assertTruth(t, "dstkill", "a", "b", since)
	if !o.TSrc.running() || o.TDst.Present {
		t.Errorf("libvirt: source %s, target %s; want the guest running on the source only", o.TSrc, o.TDst)
	}
	if after := completedTotals(); after["a"] != before["a"] || after["b"] != before["b"] {
		t.Errorf("ferry_migrations_total{result=completed} grew: before %v, after %v", before, after)
	}
	scr.check(t)
}

// TestLauncherSocketRemovedMidMigration: under KubeVirt each virt-launcher
// pod has its own libvirt socket, found by a glob; the pod's socket can
// vanish (the pod is deleted, its volume unmounted) while libvirt keeps
// migrating. Ferry must then stop claiming the job is running: it can no
// longer know, and says so (Lost), while the target's ferryd, still
// watching, records what really happened.
func TestLauncherSocketRemovedMidMigration(t *testing.T) {
	launchers := filepath.Join(bed.Node("a").Dir, "launchers")
	link := filepath.Join(launchers, "pod-sockrm", "libvirt-sock")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(launchers) })
	// A hard link, not a symlink: it is a socket itself, as a launcher's
	// is, and ferryd dials no symlink a glob matches.
	if err := os.Link(bed.Node("a").LibvirtSocket, link); err != nil {
		t.Fatal(err)
	}
	withFerrydArgs(t, "a", "--libvirt-socket-glob", filepath.Join(launchers, "*", "libvirt-sock"))
	// Idle after touching its memory, with a bandwidth cap: one long first
	// pass (~20 s) that then converges at once, so the migration is surely
	// still going when the socket goes, and surely completes.
	guest(t, testbed.GuestSpec{Name: "sockrm", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: -1})
	scr := pollMetrics(t, "a", "b")
	since := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: "sockrm", From: "a", To: "b", Via: "socat", BandwidthMiBs: 20})
	running := waitJob(t, "a", "sockrm", "the source job running, seen through the link", time.Minute, func(j api.Job) bool {
		return j.Phase == api.PhaseRunning && len(j.Samples) > 0
	})
	if running.Socket != link {
		t.Fatalf("source job watched through %q, want the launcher socket %q", running.Socket, link)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	// The glob is read again every 5 s, and a socket is gone once two scans
	// in a row miss it. Not fatal: what the target's ferryd and libvirt say
	// at the end is worth seeing either way.
	var src api.Job
	for deadline := removed.Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if j, ok := ferryOn("a").job("sockrm"); ok {
			if src = j; j.Phase != api.PhaseRunning {
				break
			}
		}
	}
	t.Logf("source job %s %v after the socket went: %s", src.Phase, time.Since(removed).Round(100*time.Millisecond), src.FailureReason)
	switch {
	case src.Phase == api.PhaseRunning:
		t.Errorf("source job still Running 10s after its libvirt socket went away (its last event: %s)", lastEvent(src))
	case src.Phase != phaseLost:
		t.Errorf("source job %s, want Lost: the migration was still going (reason %q)", src.Phase, src.FailureReason)
	case !strings.Contains(src.FailureReason, link):
		t.Errorf("source job's reason does not name the socket %s: %q", link, src.FailureReason)
	}
	var series []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		series = series[:0]
		for _, l := range ferryOn("a").metrics() {
			if strings.HasPrefix(l, "ferry_migration_") && strings.Contains(l, `domain="sockrm"`) {
				series = append(series, l)
			}
		}
		if len(series) == 0 {
			break
		}
	}
	if len(series) > 0 {
		t.Errorf("node a still serves %d series of the job it lost sight of, e.g. %s", len(series), series[0])
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("libvirt's migration failed after the socket link was removed: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("migration still going 90s after the socket was removed")
	}
	o := assertTruth(t, "sockrm", "a", "b", since)
	if o.Src.Phase != phaseLost {
		t.Errorf("source job ended %s after the migration finished, want it to stay Lost", o.Src.Phase)
	}
	if !o.TDst.migratedHere() || o.Dst.Phase != api.PhaseCompleted {
		t.Errorf("libvirt: target %s; target job %s: want the migration completed and recorded by the target's ferryd", o.TDst, o.Dst.Phase)
	}
	scr.check(t)
}

func lastEvent(j api.Job) string {
	if len(j.Events) == 0 {
		return "none"
	}
	e := j.Events[len(j.Events)-1]
	return e.Kind + ": " + e.Detail
}
