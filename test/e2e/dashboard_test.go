//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/deploy/dashboard"
	"github.com/ferry-vm/ferry/test/testbed"
)

// Grafana's variables as a dashboard showing every node would fill them;
// the windows are long enough for the bed's 500ms scrapes.
var grafanaVars = strings.NewReplacer(`$node`, `.*`, `$__rate_interval`, `10s`, `$__range`, `1h`)

// checkDashboard evaluates every query of the shipped dashboard in the
// bed's Prometheus while a migration is in flight: none may fail, and the
// in-flight ones must return series.
func checkDashboard(t *testing.T) {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	inFlight := map[string]bool{}
	for _, r := range dashboard.Rows {
		for _, p := range r.Panels {
			for _, q := range p.Queries {
				inFlight[q.Expr] = q.InFlight
			}
		}
	}
	var queries, empty int
	for _, p := range file.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := prom.Query(ctx, grafanaVars.Replace(q.Expr))
			cancel()
			switch {
			case err != nil:
				t.Errorf("panel %q query %s: %v", p.Title, q.RefID, err)
			case len(res) == 0 && inFlight[q.Expr]:
				t.Errorf("panel %q query %s returned nothing with a migration in flight: %s", p.Title, q.RefID, q.Expr)
			case len(res) == 0:
				empty++
			}
		}
	}
	t.Logf("dashboard: %d queries evaluated in Prometheus, %d empty (none of them in-flight ones)", queries, empty)
}
