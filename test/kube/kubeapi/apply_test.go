//go:build kube

package kubeapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

func TestApplyDryRun(t *testing.T) {
	ctx := kubeapi.Context(t, 2*time.Minute)
	if err := srv.InstallMonitoringCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	// A dry run stores nothing, so the namespace must exist for real beforehand.
	ns := srv.Namespace(t, ctx, "apply")
	manifests := fmt.Sprintf(`
apiVersion: v1
kind: ServiceAccount
metadata: {name: ferry, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ferry-%[1]s}
rules:
- apiGroups: [kubevirt.io]
  resources: [virtualmachineinstances/status]
  verbs: [patch]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ferryd, namespace: %[1]s}
spec:
  selector: {matchLabels: {app: ferryd}}
  template:
    metadata: {labels: {app: ferryd}}
    spec:
      serviceAccountName: ferry
      containers:
      - name: ferryd
        image: ferry:test
        ports: [{name: metrics, containerPort: 9090}]
---
apiVersion: v1
kind: Service
metadata: {name: ferryd-metrics, namespace: %[1]s, labels: {app: ferryd}}
spec:
  selector: {app: ferryd}
  ports: [{name: metrics, port: 9090}]
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: ferryd, namespace: %[1]s}
spec:
  selector: {matchLabels: {app: ferryd}}
  endpoints: [{port: metrics}]
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: ferry, namespace: %[1]s}
spec:
  groups:
  - name: ferry
    rules:
    - alert: FerryMigrationStuck
      expr: ferry_migration_stalled_seconds > 300
`, ns)
	if err := srv.Apply(ctx, []byte(manifests), true); err != nil {
		t.Fatal(err)
	}
	smon := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
	if _, err := srv.Dynamic.Resource(smon).Namespace(ns).Get(ctx, "ferryd", metav1.GetOptions{}); !errors.IsNotFound(err) {
		t.Errorf("dry run stored the ServiceMonitor: err = %v", err)
	}

	// For real this time, and again: apply is idempotent.
	for range 2 {
		if err := srv.Apply(ctx, []byte(manifests), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Dynamic.Resource(smon).Namespace(ns).Get(ctx, "ferryd", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
}

func TestApplyErrorsNameTheObject(t *testing.T) {
	ctx := kubeapi.Context(t, 2*time.Minute)
	ns := srv.Namespace(t, ctx, "apply-errors")
	err := srv.Apply(ctx, []byte(fmt.Sprintf(`
apiVersion: v1
kind: ConfigMap
metadata: {name: good, namespace: %[1]s}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: Not_A_Name, namespace: %[1]s}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: %[1]s}
`, ns)), false)
	if err == nil {
		t.Fatal("no error")
	}
	t.Logf("Apply: %v", err)
	for _, want := range []string{
		"ConfigMap " + ns + "/Not_A_Name (document 2)",
		"Widget " + ns + "/w (document 3)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q", want)
		}
	}
	if strings.Contains(err.Error(), "good") {
		t.Errorf("error names the valid ConfigMap")
	}
	// Apply goes on after a failure.
	if _, err := srv.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "good", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
}
