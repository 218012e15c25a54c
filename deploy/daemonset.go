package deploy

import (
	_ "embed"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

//go:embed daemonset.yaml
var daemonSetYAML []byte

// DaemonSet is daemonset.yaml, read strictly: what the tests run ferryd
// with is exactly what ships.
func DaemonSet() (appsv1.DaemonSet, error) {
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(daemonSetYAML, &ds); err != nil {
		return ds, fmt.Errorf("deploy/daemonset.yaml: %w", err)
	}
	return ds, nil
}
