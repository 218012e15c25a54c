package kubeapi

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// KubeVirt's own, so tests meet the contract of a real cluster: no status
	// subresource, a typed status.
	//go:embed kubevirt-vmi-crd.yaml
	vmiCRD []byte
	//go:embed monitoring-crds.yaml
	monitoringCRDs []byte
	//go:embed kubevirt-config-crds.yaml
	kubevirtConfigCRDs []byte
)

// VMIResource is the VirtualMachineInstance resource that Start installs.
var VMIResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallMonitoringCRDs installs minimal ServiceMonitor and PrometheusRule CRDs
// (monitoring.coreos.com/v1), so that manifests using them can be applied or dry-run.
func (s *Server) InstallMonitoringCRDs(ctx context.Context) error {
	return s.installCRDs(ctx, monitoringCRDs)
}

// InstallKubeVirtConfigCRDs installs KubeVirt's KubeVirt (kubevirt.io/v1) and
// MigrationPolicy (migrations.kubevirt.io/v1alpha1) CRDs, cut down to the fields Ferry
// reads, so that a cluster's migration configuration can be stored as KubeVirt's is.
// Start leaves them out, so that a test can first read a cluster without them.
func (s *Server) InstallKubeVirtConfigCRDs(ctx context.Context) error {
	return s.installCRDs(ctx, kubevirtConfigCRDs)
}

// installCRDs applies CRD manifests and returns once their resources can be created
// without the API server's deliberate delay.
func (s *Server) installCRDs(ctx context.Context, docs []byte) error {
	objs, err := decodeDocuments(docs)
	if err != nil {
		return err
	}
	if err := s.Apply(ctx, docs, false); err != nil {
		return err
	}
	var lastEstablished time.Time
	for _, o := range objs {
		t, err := s.waitEstablished(ctx, o.obj.GetName())
		if err != nil {
			return err
		}
		if t.After(lastEstablished) {
			lastEstablished = t
		}
	}
	// A create within 2 s of a CRD's Established transition sleeps 2 s inside the API
	// server (it covers HA peers that have not seen the CRD yet). Waiting here once
	// keeps that delay out of every test's first create.
	select {
	case <-time.After(time.Until(lastEstablished.Add(2 * time.Second))):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitEstablished waits until the CRD name is Established and its kind is in
// discovery, and returns the Established condition's transition time.
func (s *Server) waitEstablished(ctx context.Context, name string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last string
	for {
		crd, err := s.Dynamic.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if t, ok := establishedSince(crd); ok {
				group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
				kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
				// The Established condition precedes the kind's appearance in
				// discovery; Apply right after must be able to map it.
				s.mapper.Reset()
				if _, err := s.mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}); err == nil {
					return t, nil
				} else if !meta.IsNoMatchError(err) {
					return time.Time{}, err
				}
				last = "kind not yet in discovery"
			} else {
				last = "not Established"
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("CustomResourceDefinition %s: %s: %w", name, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func establishedSince(crd *unstructured.Unstructured) (time.Time, bool) {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Established" || m["status"] != "True" {
			continue
		}
		ts, _ := m["lastTransitionTime"].(string)
		t, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			// Without a time, assume it just happened: the longest wait.
			return time.Now(), true
		}
		return t, true
	}
	return time.Time{}, false
}
