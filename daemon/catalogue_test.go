package daemon

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ferry-vm/ferry/metrics"
)

// What a running ferryd (proxy on) serves is what the catalogue declares,
// and the series an alert needs from the first scrape are there: a proxy
// wired without its metrics would count nothing, and its alert would never
// fire.
func TestFerrydServesTheCatalogue(t *testing.T) {
	d, _ := startDaemon(t)
	required := []string{"ferry_build_info", "ferry_libvirt_up", "ferry_proxy_rejected_total", "ferry_migration_slots", "ferry_migration_slots_used", "ferry_migration_queued"}
	var mfs []*dto.MetricFamily
	// The pool reports its sockets once it has started.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if mfs, err = d.reg.Gather(); err != nil {
			t.Fatal(err)
		}
		if hasAll(mfs, required) || time.Now().After(deadline) {
			break
		}
	}
	served := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "ferry_") {
			continue
		}
		served[name] = true
		def, ok := metrics.Lookup(name)
		switch {
		case !ok:
			t.Errorf("ferryd serves %s, which the catalogue does not declare", name)
		case mf.GetHelp() != def.Help || strings.ToLower(mf.GetType().String()) != string(def.Type):
			t.Errorf("%s served as %s %q, declared %s %q", name, mf.GetType(), mf.GetHelp(), def.Type, def.Help)
		case !sameLabels(mf, def.Labels):
			t.Errorf("%s served with labels other than %v", name, def.Labels)
		}
	}
	for _, want := range required {
		if !served[want] {
			t.Errorf("a fresh ferryd with its proxy on does not serve %s", want)
		}
	}
}

func hasAll(mfs []*dto.MetricFamily, names []string) bool {
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, n := range names {
		if !have[n] {
			return false
		}
	}
	return true
}

func sameLabels(mf *dto.MetricFamily, want []string) bool {
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			return false
		}
		for _, l := range m.GetLabel() {
			found := false
			for _, w := range want {
				found = found || w == l.GetName()
			}
			if !found {
				return false
			}
		}
	}
	return true
}
