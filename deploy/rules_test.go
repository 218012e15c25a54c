package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ferry-vm/ferry/internal/testenv"
)

// promtool is installed by `testbed prepare` (make prepare), which make
// test runs before the end-to-end suite.
func promtool(t *testing.T) string {
	t.Helper()
	return testenv.Tool(t, "promtool", "make prepare installs it")
}

// ruleDir writes the extracted rules and a copy of the unit tests side by side.
func ruleDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := RuleFile()
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"rules.yaml": rules, "alerts_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

func TestPromtoolChecksRules(t *testing.T) {
	runPromtool(t, ruleDir(t), "check", "rules", "rules.yaml")
}

func TestPromtoolRuleUnitTests(t *testing.T) {
	runPromtool(t, ruleDir(t), "test", "rules", "alerts_test.yaml")
}

// Every alert needs a case where it fires and one where it stays silent,
// and what an operator is paged with: a severity and a runbook.
func TestEveryAlertIsUnitTested(t *testing.T) {
	groups, err := Groups()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []struct {
					Labels      map[string]string `json:"exp_labels"`
					Annotations map[string]string `json:"exp_annotations"`
				} `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatalf("alerts_test.yaml: %v", err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) == 0 {
				silent[a.Alertname] = true
				continue
			}
			fires[a.Alertname] = true
			for _, e := range a.ExpAlerts {
				if e.Labels["severity"] == "" || e.Labels["node"] == "" || e.Annotations["runbook_url"] == "" {
					t.Errorf("%s: an expected alert without severity, node or runbook_url: %v %v", a.Alertname, e.Labels, e.Annotations)
				}
			}
		}
	}
	var n int
	for _, g := range groups {
		for _, r := range g.Rules {
			n++
			if !fires[r.Alert] || !silent[r.Alert] {
				t.Errorf("%s: alerts_test.yaml needs a case where it fires (has: %v) and one where it stays silent (has: %v)", r.Alert, fires[r.Alert], silent[r.Alert])
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s: no severity label", r.Alert)
			}
			if u := r.Annotations["runbook_url"]; !strings.HasPrefix(u, "https://") || r.Annotations["summary"] == "" {
				t.Errorf("%s: runbook_url %q, summary %q", r.Alert, u, r.Annotations["summary"])
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d alerts in alerts.yaml", n)
	}
}

func TestRuleFileCarriesThePrometheusRule(t *testing.T) {
	groups, err := Groups()
	if err != nil {
		t.Fatal(err)
	}
	b, err := RuleFile()
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &file); err != nil {
		t.Fatalf("rule file: %v\n%s", err, b)
	}
	if len(file.Groups) != len(groups) {
		t.Fatalf("rule file has %d groups, the PrometheusRule %d", len(file.Groups), len(groups))
	}
	for i, g := range groups {
		if len(file.Groups[i].Rules) != len(g.Rules) {
			t.Fatalf("group %s: %d rules, want %d", g.Name, len(file.Groups[i].Rules), len(g.Rules))
		}
		for j, r := range g.Rules {
			if got := file.Groups[i].Rules[j]; got.Alert != r.Alert || got.Expr != r.Expr || got.For != r.For {
				t.Errorf("rule %d of %s: %+v, want %+v", j, g.Name, got, r)
			}
		}
	}
}
