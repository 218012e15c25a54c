// Package deploy holds Ferry's Kubernetes manifests; its Go side hands the
// alert rules of the PrometheusRule in alerts.yaml to tools that take a plain
// Prometheus rule file (promtool, a Prometheus server without the operator),
// so that what is checked and evaluated is exactly what ships.
package deploy

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

//go:embed alerts.yaml
var alertsYAML []byte

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []RuleGroup `json:"groups"`
	} `json:"spec"`
}

// RuleGroup is one group of the PrometheusRule, as Prometheus reads it.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is one alerting rule.
type Rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Groups returns the rule groups of deploy/alerts.yaml; a field Prometheus
// would not know is an error here too.
func Groups() ([]RuleGroup, error) {
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(alertsYAML, &pr); err != nil {
		return nil, fmt.Errorf("deploy/alerts.yaml: %w", err)
	}
	if pr.Kind != "PrometheusRule" || pr.APIVersion != "monitoring.coreos.com/v1" {
		return nil, fmt.Errorf("deploy/alerts.yaml: kind %q apiVersion %q, want a monitoring.coreos.com/v1 PrometheusRule", pr.Kind, pr.APIVersion)
	}
	if len(pr.Spec.Groups) == 0 {
		return nil, fmt.Errorf("deploy/alerts.yaml: the PrometheusRule has no groups")
	}
	return pr.Spec.Groups, nil
}

// RuleFile returns the PrometheusRule's groups as a Prometheus rule file.
func RuleFile() ([]byte, error) {
	var pr struct {
		Spec struct {
			Groups json.RawMessage `json:"groups"`
		} `json:"spec"`
	}
	if _, err := Groups(); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(alertsYAML, &pr); err != nil {
		return nil, fmt.Errorf("deploy/alerts.yaml: %w", err)
	}
	return yaml.JSONToYAML([]byte(`{"groups":` + string(pr.Spec.Groups) + `}`))
}
