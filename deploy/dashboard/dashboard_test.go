package dashboard

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/ferry-vm/ferry/internal/generated"
)

// deploy/grafana-dashboard.json is what this package builds;
// FERRY_UPDATE_DOCS=1 (make generate) writes it.
func TestDashboardDocIsCurrent(t *testing.T) {
	want, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	generated.Check(t, "../grafana-dashboard.json", want, "deploy/dashboard")
}

// Grafana reads the file back into every panel with its queries, each
// described, and nothing beyond the panels described here.
func TestDashboardReadsBack(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	b, err := os.ReadFile("../grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard.Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	want := map[string]Panel{}
	for _, r := range Rows {
		for _, p := range r.Panels {
			if p.Description == "" || len(p.Queries) == 0 {
				t.Errorf("panel %q: a description and queries are required", p.Title)
			}
			want[p.Title] = p
		}
	}
	ids := map[uint32]bool{}
	var n int
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue
		}
		n++
		title := *p.Panel.Title
		if p.Panel.Id == nil || ids[*p.Panel.Id] {
			t.Errorf("panel %q: missing or repeated id", title)
		} else {
			ids[*p.Panel.Id] = true
		}
		spec, ok := want[title]
		if !ok {
			t.Errorf("panel %q is not in Rows", title)
			continue
		}
		if len(p.Panel.Targets) != len(spec.Queries) {
			t.Errorf("panel %q: %d targets, want %d", title, len(p.Panel.Targets), len(spec.Queries))
		}
	}
	if n != len(want) {
		t.Errorf("%d panels in the file, %d in Rows", n, len(want))
	}
}

func TestOperationsDocDescribesEveryPanel(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Rows {
		for _, p := range r.Panels {
			if !strings.Contains(string(b), "**"+p.Title+"**") {
				t.Errorf("docs/operations.md does not describe the panel %q (as **%s**)", p.Title, p.Title)
			}
		}
	}
}
