package metrics

import (
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every collector and vector ferryd registers describes exactly the
// catalogue: nothing exported undeclared, nothing declared unexported.
func TestCatalogueIsWhatIsRegistered(t *testing.T) {
	tr, _ := everyPhase(t)
	col := NewCollector("n1", "test", tr, nil)
	// All in one registry, as in ferryd: no name registered twice.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	NewPolicyActions(reg)
	NewProxy(reg)
	NewTimes("n1", reg)
	times := NewTimes("n1", nil)
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		col.Describe(ch)
		for _, c := range []prometheus.Collector{NewPolicyActions(nil), NewProxy(nil).Bytes, NewProxy(nil).Connections, NewProxy(nil).Rejected, NewProxy(nil).DialDuration,
			times.downtime, times.duration} {
			c.Describe(ch)
		}
		close(ch)
	}()
	// A Desc shows its name and labels only in its String.
	name, labels := regexp.MustCompile(`fqName: "([^"]+)"`), regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	described := map[string]string{}
	for d := range ch {
		n, l := name.FindStringSubmatch(d.String()), labels.FindStringSubmatch(d.String())
		if n == nil || l == nil {
			t.Fatalf("cannot read %s", d)
		}
		described[n[1]] = l[1]
	}
	var names []string
	for _, d := range Catalogue() {
		names = append(names, d.Name)
		if got, ok := described[d.Name]; !ok {
			t.Errorf("%s is in the catalogue but nothing registers it", d.Name)
		} else if want := strings.Join(d.Labels, ","); got != want {
			t.Errorf("%s: registered with labels {%s}, catalogued {%s}", d.Name, got, want)
		}
		delete(described, d.Name)
	}
	for n := range described {
		t.Errorf("%s is registered but not in the catalogue", n)
	}
	if !sort.StringsAreSorted(names) || len(names) < 20 {
		t.Errorf("catalogue not sorted or short: %v", names)
	}
}

func TestLookupFindsAHistogramsSeries(t *testing.T) {
	for _, n := range []string{"ferry_proxy_dial_duration_seconds_bucket", "ferry_proxy_dial_duration_seconds_count", "ferry_migration_info"} {
		if _, ok := Lookup(n); !ok {
			t.Errorf("Lookup(%q) found nothing", n)
		}
	}
	for _, n := range []string{"ferry_migration_info_count", "ferry_nonesuch"} {
		if d, ok := Lookup(n); ok {
			t.Errorf("Lookup(%q) found %s", n, d.Name)
		}
	}
}
