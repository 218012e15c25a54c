//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

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
