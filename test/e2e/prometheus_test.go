//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"sigs.k8s.io/yaml"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/deploy"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/test/testbed"
)

// alerts returns the bed's Prometheus's ALERTS series of one alert in one
// state ("pending" or "firing") whose labels include want (name=value pairs).
func alerts(name, state string, want ...string) ([]testbed.Sample, error) {
	sel := []string{fmt.Sprintf("alertname=%q", name), fmt.Sprintf("alertstate=%q", state)}
	for _, w := range want {
		k, v, _ := strings.Cut(w, "=")
		sel = append(sel, fmt.Sprintf("%s=%q", k, v))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return prom.Query(ctx, "ALERTS{"+strings.Join(sel, ",")+"}")
}

// waitAlert polls Prometheus every 100ms until the alert is in state with
// those labels, and returns when it first saw it and its labels.
func waitAlert(t *testing.T, name, state string, timeout time.Duration, want ...string) (time.Time, map[string]string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		s, err := alerts(name, state, want...)
		if err == nil && len(s) > 0 {
			return time.Now(), s[0].Metric
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Prometheus: %s %v never %s within %v (last error: %v); ALERTS now: %s", name, want, state, timeout, last, allAlerts())
	return time.Time{}, nil
}

func allAlerts() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := prom.Query(ctx, "ALERTS")
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, x := range s {
		out = append(out, fmt.Sprint(x.Metric))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// firstSeen polls cond in the background every 50ms until it holds or the
// test ends; the returned func waits up to timeout for that moment.
func firstSeen(t *testing.T, cond func() bool) func(timeout time.Duration) (time.Time, bool) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan time.Time, 1)
	go func() {
		for ctx.Err() == nil {
			if cond() {
				done <- time.Now()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return func(timeout time.Duration) (time.Time, bool) {
		select {
		case at := <-done:
			done <- at
			return at, true
		case <-time.After(timeout):
			return time.Time{}, false
		}
	}
}

// postCopyAlertWatch watches, from before a post-copy failure, each node's
// ferryd showing the domain post-copy-failed and the bed's Prometheus
// firing FerryVMIPostCopyFailed for it there; check then requires the
// alert within two evaluation intervals of the metric.
func postCopyAlertWatch(t *testing.T, domain string, nodes ...string) (check func()) {
	type watch struct {
		node          string
		metric, alert func(time.Duration) (time.Time, bool)
	}
	var ws []watch
	for _, n := range nodes {
		ws = append(ws, watch{n,
			firstSeen(t, func() bool {
				v, ok := ferryOn(n).metric("ferry_domain_attention", `domain="`+domain+`"`, `reason="postcopy_failed"`)
				return ok && v == 1
			}),
			firstSeen(t, func() bool {
				s, err := alerts("FerryVMIPostCopyFailed", "firing", "domain="+domain, "node="+n)
				return err == nil && len(s) > 0
			}),
		})
	}
	return func() {
		t.Helper()
		limit := 2 * prom.EvalInterval
		for _, w := range ws {
			m, ok := w.metric(time.Minute)
			if !ok {
				t.Errorf("node %s: ferryd never showed %s post-copy-failed", w.node, domain)
				continue
			}
			a, ok := w.alert(limit + 30*time.Second)
			if !ok {
				t.Errorf("node %s: FerryVMIPostCopyFailed for %s never fired in Prometheus; ALERTS: %s", w.node, domain, allAlerts())
				continue
			}
			lat := a.Sub(m)
			t.Logf("node %s: FerryVMIPostCopyFailed firing in Prometheus %v after ferryd's metric (limit %v: two evaluation intervals)", w.node, lat.Round(time.Millisecond), limit)
			if lat > limit {
				t.Errorf("node %s: alert firing %v after the metric changed, limit %v", w.node, lat, limit)
			}
			s, err := alerts("FerryVMIPostCopyFailed", "firing", "domain="+domain, "node="+w.node)
			if err != nil || len(s) != 1 || s[0].Metric["severity"] != "critical" {
				t.Errorf("node %s: firing alert %v (%v), want one with severity critical", w.node, s, err)
			}
		}
	}
}

// bedRules are deploy/'s rules as the bed's Prometheus evaluates them,
// with FerryGuestRunningOnTwoNodes waiting 10 s rather than a minute: the
// suite is shorter, and every migration in it has to show both nodes
// running its guest for less than that, a sixth of what production allows.
func bedRules() ([]byte, error) {
	groups, err := deploy.Groups()
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		for i := range g.Rules {
			if g.Rules[i].Alert == "FerryGuestRunningOnTwoNodes" {
				g.Rules[i].For = twoNodesFor.String()
			}
		}
	}
	return yaml.Marshal(map[string]any{"groups": groups})
}

const twoNodesFor = 10 * time.Second

// A persistent guest migrates a -> b with libvirt's own client, as KubeVirt
// migrates; its source keeps the definition, which is then started again
// on a, as a rebooted node autostarts what it holds: both copies fire
// FerryGuestRunningOnTwoNodes. The migration, and one back in post-copy,
// fire nothing, nor has any migration of the suite before; the source's
// downtime histogram grew by libvirt's own completed-job downtime.
func TestAGuestOnTwoNodesFiresAndItsMigrationsDoNot(t *testing.T) {
	const name = "twice"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: -1, Persistent: true})
	uuid := domainUUID(t, "a", name)

	downtime, duration := endedTimes("a"), endedTimes("a", "duration")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	there := time.Now()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "socat"}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, "a", name, "Completed", 15*time.Second, completed)
	checkTimesAreLibvirts(t, name, downtime, duration)
	heldOnlyOn(t, uuid, "b", there)

	twice := startDefinition(t, "a", name)
	for _, n := range []string{"a", "b"} {
		_, labels := waitAlert(t, "FerryGuestRunningOnTwoNodes", "firing", twoNodesFor+20*time.Second, "uuid="+uuid, "node="+n)
		if labels["domain"] != name || labels["severity"] != "critical" {
			t.Errorf("node %s: alert labels %v", n, labels)
		}
	}
	if err := twice.destroy(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "FerryGuestRunningOnTwoNodes to resolve", 15*time.Second, func() bool {
		s, err := alerts("FerryGuestRunningOnTwoNodes", "firing", "uuid="+uuid)
		return err == nil && len(s) == 0
	})

	back := time.Now()
	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "b", To: "a", Via: "socat", BandwidthMiBs: 16, PostCopyAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, "a", name, "Completed in post-copy", 15*time.Second, func(j api.Job) bool { return completed(j) && j.Mode == api.ModePostCopy })
	heldOnlyOn(t, uuid, "a", back)
	if s := everFired(t, time.Since(back), `uuid="`+uuid+`"`); len(s) > 0 {
		t.Errorf("the post-copy migration back fired FerryGuestRunningOnTwoNodes: %v", s)
	}
	if s := everFired(t, 2*time.Hour, `uuid!~"`+strings.Join(append(twiceOnPurpose(), uuid), "|")+`"`); len(s) > 0 {
		t.Errorf("migrations of the suite so far fired FerryGuestRunningOnTwoNodes: %v", s)
	}
	pending, _ := promQuery(`count_over_time(ALERTS{alertname="FerryGuestRunningOnTwoNodes", alertstate="pending"}[2h])`)
	t.Logf("evaluations (every %v) each guest was pending on two nodes in the suite so far: %v", prom.EvalInterval, pending)
}

// overlapLimit bounds how long a migration may show its guest held on
// both nodes: the two nodes are scraped apart (every 500ms on the bed), and
// each ferryd sees a state change from libvirt's event at once.
const overlapLimit = 2 * time.Second

// heldOnlyOn waits until Prometheus sees the guest held on node alone,
// then requires that since a migration began no more than overlapLimit
// showed it held on two nodes: a side that waits for the other counted as
// holding it would show the whole migration long.
func heldOnlyOn(t *testing.T, uuid, node string, since time.Time) {
	t.Helper()
	waitFor(t, "Prometheus to see the guest held on "+node+" alone", 15*time.Second, func() bool {
		s, err := promQuery(`count by (node) (ferry_domain_active{uuid="` + uuid + `"})`)
		return err == nil && len(s) == 1 && s[0].Metric["node"] == node
	})
	const step = 250 * time.Millisecond
	s, err := promQuery(fmt.Sprintf(`count_over_time((count by (uuid) (max by (uuid, node, socket) (ferry_domain_active{uuid=%q})) > 1)[%ds:%dms])`,
		uuid, int(time.Since(since).Seconds())+1, step.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	var both time.Duration
	if len(s) > 0 {
		both = time.Duration(s[0].Value) * step
	}
	t.Logf("migration to %s: Prometheus saw the guest held on two nodes for %v", node, both)
	if both > overlapLimit {
		t.Errorf("the migration to %s showed its guest held on both nodes for %v (limit %v)", node, both, overlapLimit)
	}
}

func promQuery(expr string) ([]testbed.Sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return prom.Query(ctx, expr)
}

// everFired lists the FerryGuestRunningOnTwoNodes alerts with matcher that
// fired within the last window.
func everFired(t *testing.T, window time.Duration, matcher string) []map[string]string {
	t.Helper()
	secs := int(window.Seconds()) + 1
	s, err := promQuery(fmt.Sprintf(`max_over_time(ALERTS{alertname="FerryGuestRunningOnTwoNodes", alertstate="firing", %s}[%ds])`, matcher, secs))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, x := range s {
		out = append(out, x.Metric)
	}
	return out
}

func domainUUID(t *testing.T, node, name string) string {
	t.Helper()
	var uuid string
	withLibvirt(t, node, func(l *libvirt.Libvirt) error {
		d, err := l.DomainLookupByName(name)
		uuid = libvirtx.UUIDString(d.UUID)
		return err
	})
	return uuid
}

// histogramSeries is a histogram's _sum and _count on one node.
type histogramSeries struct{ sum, count float64 }

// endedTimes reads ferryd's histogram of the source's completed jobs on
// node: downtime, or the metric named by the second argument.
func endedTimes(node string, which ...string) histogramSeries {
	name := "ferry_migration_downtime_seconds"
	if len(which) > 0 {
		name = "ferry_migration_" + which[0] + "_seconds"
	}
	f := ferryOn(node)
	sum, _ := f.metric(name+"_sum", `role="source"`, `result="completed"`)
	count, _ := f.metric(name+"_count", `role="source"`, `result="completed"`)
	return histogramSeries{sum, count}
}

// checkTimesAreLibvirts: the one completed migration from a grew the
// source's histograms by the downtime and elapsed time libvirt keeps in
// the source's completed-job statistics.
func checkTimesAreLibvirts(t *testing.T, name string, downtime, duration histogramSeries) {
	t.Helper()
	truth, err := readNodeTruth("a", name)
	if err != nil {
		t.Fatal(err)
	}
	s := truth.Stats
	if s == nil || s.Type != jobCompleted || s.DowntimeMs == 0 || s.ElapsedMs == 0 {
		t.Fatalf("libvirt on a kept no completed migration with its downtime: %v (%s)", s, truth.StatsErr)
	}
	var dt, du histogramSeries
	waitFor(t, "ferryd on a to observe the ended job", 10*time.Second, func() bool {
		dt, du = endedTimes("a"), endedTimes("a", "duration")
		return dt.count > downtime.count && du.count > duration.count
	})
	got, want := dt.sum-downtime.sum, float64(s.DowntimeMs)/1000
	t.Logf("downtime: libvirt %d ms, histogram sum grew by %.3f s (count %v -> %v); duration: libvirt %d ms, sum grew by %.3f s",
		s.DowntimeMs, got, downtime.count, dt.count, s.ElapsedMs, du.sum-duration.sum)
	if dt.count != downtime.count+1 || math.Abs(got-want) > 1e-6 {
		t.Errorf("downtime histogram grew by %v in %v observations, want libvirt's %v s in one", got, dt.count-downtime.count, want)
	}
	if got, want := du.sum-duration.sum, float64(s.ElapsedMs)/1000; du.count != duration.count+1 || math.Abs(got-want) > 1e-6 {
		t.Errorf("duration histogram grew by %v in %v observations, want libvirt's %v s in one", got, du.count-duration.count, want)
	}
}

// runningCopy is a guest started from the definition a node kept.
type runningCopy struct {
	node string
	dom  libvirt.Domain
}

func startDefinition(t *testing.T, node, name string) runningCopy {
	t.Helper()
	l, err := bed.Libvirt(node)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	d, err := l.DomainLookupByName(name)
	if err != nil {
		t.Fatalf("node %s kept no definition of %s: %v", node, name, err)
	}
	if err := l.DomainCreate(d); err != nil {
		t.Fatalf("starting %s's definition on %s: %v", name, node, err)
	}
	return runningCopy{node, d}
}

func (c runningCopy) destroy() error {
	l, err := bed.Libvirt(c.node)
	if err != nil {
		return err
	}
	defer l.Disconnect()
	return l.DomainDestroy(c.dom)
}

var (
	onPurposeMu sync.Mutex
	onPurpose   []string
)

// runsTwiceOnPurpose marks a guest a test runs on two nodes on purpose
// (an operator's wrong word, say): FerryGuestRunningOnTwoNodes firing for
// it is right, and no migration's doing.
func runsTwiceOnPurpose(uuid string) {
	onPurposeMu.Lock()
	defer onPurposeMu.Unlock()
	onPurpose = append(onPurpose, uuid)
}

func twiceOnPurpose() []string {
	onPurposeMu.Lock()
	defer onPurposeMu.Unlock()
	return append([]string(nil), onPurpose...)
}
