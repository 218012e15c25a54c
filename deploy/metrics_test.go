package deploy

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"testing"

	"github.com/ferry-vm/ferry/metrics"
)

// Labels a series has beyond ferryd's own: the target's, and node, which
// the ServiceMonitor gives the proxy's series (service.yaml).
var scrapeLabels = []string{"node", "instance", "job"}

var (
	metricName = regexp.MustCompile(`\bferry_[a-zA-Z0-9_]*`)
	selector   = regexp.MustCompile(`\b(ferry_[a-zA-Z0-9_]+)\{([^{}]*)\}`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// Every metric the alerts, their unit tests and the dashboard name is one
// ferryd exports, and every label they select on is one it has: a metric
// renamed in metrics/ must not leave an alert that never fires.
func TestAlertsAndDashboardUseCataloguedMetrics(t *testing.T) {
	groups, err := Groups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) == 0 {
		t.Fatal("no alert groups")
	}
	used := map[string]bool{}
	for _, f := range []string{"alerts.yaml", "alerts_test.yaml", "grafana-dashboard.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		names := metricName.FindAllString(text, -1)
		if len(names) == 0 {
			t.Errorf("%s names no ferry_ metric", f)
		}
		for _, n := range names {
			used[n] = true
			if _, ok := metrics.Lookup(n); !ok {
				t.Errorf("%s: %s is not a metric ferryd exports (see docs/metrics.md)", f, n)
			}
		}
		for _, m := range selector.FindAllStringSubmatch(text, -1) {
			d, ok := metrics.Lookup(m[1])
			if !ok {
				continue
			}
			labels := append(append([]string{}, d.Labels...), scrapeLabels...)
			if d.Type == metrics.Histogram {
				labels = append(labels, "le")
			}
			for _, l := range matcher.FindAllStringSubmatch(m[2], -1) {
				if !slices.Contains(labels, l[1]) {
					t.Errorf("%s: %s{%s}: %s has no label %q (it has %v)", f, m[1], m[2], m[1], l[1], d.Labels)
				}
			}
		}
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("metrics used by the alerts and the dashboard: %v", names)
}
