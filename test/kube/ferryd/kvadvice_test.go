//go:build kube

package ferryd_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

// KubeVirt's configuration as a cluster holds it: a KubeVirt CR and two
// MigrationPolicies, each with a field its CRD prunes. Created, not applied: a
// server-side apply refuses fields the schema does not declare, where a create
// prunes them.
const kubevirtConfig = `
apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: kubevirt}
spec:
  imagePullPolicy: IfNotPresent
  configuration:
    evictionStrategy: LiveMigrate
    developerConfiguration: {featureGates: [Snapshot]}
    migrations:
      bandwidthPerMigration: 256Mi
      completionTimeoutPerGiB: 800
      allowPostCopy: true
      parallelOutboundMigrationsPerNode: 4
      progressTimeout: 300
      notAKubeVirtField: 1
---
apiVersion: migrations.kubevirt.io/v1alpha1
kind: MigrationPolicy
metadata: {name: db-fast}
spec:
  selectors:
    virtualMachineInstanceSelector: {workload: db}
    namespaceSelector: {tier: prod}
  bandwidthPerMigration: 1Gi
  allowAutoConverge: true
  completionTimeoutPerGiB: 300
  maxDowntimeMs: 500
  progressTimeout: 10
---
apiVersion: migrations.kubevirt.io/v1alpha1
kind: MigrationPolicy
metadata: {name: a-prod}
spec:
  selectors:
    namespaceSelector: {tier: prod}
  bandwidthPerMigration: 8388608
`

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TestKubeVirtMigrationAdvice stores KubeVirt's configuration and VMIs through
// KubeVirt's own VMI CRD and (cut-down) KubeVirt and MigrationPolicy CRDs, reads them
// back as ferryd's ServiceAccount with deploy/rbac.yaml, and checks what
// EffectiveMigration and DrainBlocker make of the stored objects: the fields they rely
// on survive the schemas' pruning, and the RBAC is enough.
func TestKubeVirtMigrationAdvice(t *testing.T) {
	ctx := kubeapi.Context(t, 3*time.Minute)
	ferry := dynamic.NewForConfigOrDie(ferryConfig())
	ferryCore := kubernetes.NewForConfigOrDie(ferryConfig())

	// A cluster without the CRDs: nothing to read, and no error.
	if _, err := srv.Dynamic.Resource(crdResource).Get(ctx, "kubevirts.kubevirt.io", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		cr, policies, err := kubevirt.ReadMigrationContext(ctx, ferry)
		if err != nil || cr != nil || policies != nil {
			t.Fatalf("without KubeVirt's CRDs: %v, %v, %v; want nothing and no error", cr, policies, err)
		}
	} else {
		t.Log("KubeVirt's CRDs are left from an earlier run against this API server: the case without them is not run")
	}
	if err := srv.InstallKubeVirtConfigCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(ctx, []byte("{apiVersion: v1, kind: Namespace, metadata: {name: kubevirt}}"), false); err != nil {
		t.Fatal(err)
	}
	createConfig(t, ctx)

	// KubeVirt takes its configuration only from a CR virt-operator has deployed.
	cr, policies, err := kubevirt.ReadMigrationContext(ctx, ferry)
	if err != nil || cr != nil {
		t.Fatalf("a KubeVirt CR without a phase: %v, %v; want none", cr, err)
	}
	if len(policies) != 2 {
		t.Fatalf("%d MigrationPolicies, want 2", len(policies))
	}
	_, err = srv.Dynamic.Resource(kubevirt.KubeVirtResource).Namespace("kubevirt").Patch(ctx, "kubevirt", types.MergePatchType,
		[]byte(`{"status":{"phase":"Deployed","observedKubeVirtVersion":"v1.9.0"}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	cr, policies, err = kubevirt.ReadMigrationContext(ctx, ferry)
	if err != nil || cr == nil || len(policies) != 2 {
		t.Fatalf("ReadMigrationContext: %v, %d policies, %v", cr, len(policies), err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(cr.Object, "spec", "configuration", "migrations", "notAKubeVirtField"); found {
		t.Error("the KubeVirt CRD kept an unknown migrations field: spec.configuration.migrations is not typed")
	}
	if fg, _, _ := unstructured.NestedSlice(cr.Object, "spec", "configuration", "developerConfiguration", "featureGates"); len(fg) != 1 {
		t.Errorf("the rest of spec.configuration was pruned: %v", cr.Object["spec"])
	}
	for _, p := range policies {
		if _, found, _ := unstructured.NestedFieldNoCopy(p.Object, "spec", "progressTimeout"); found {
			t.Errorf("MigrationPolicy %s kept progressTimeout, which KubeVirt's CRD prunes", p.GetName())
		}
	}

	prod := labelledNamespace(t, ctx, "prod", map[string]string{"tier": "prod", "region": "eu"})
	dev := labelledNamespace(t, ctx, "dev", map[string]string{"tier": "dev"})
	vmis := []struct {
		ns, name, strategy string
		labels             map[string]any
		migratable         map[string]any
		migrationState     map[string]any
		want               api.KubeVirtMigration
		block              *api.DrainBlock
	}{{
		ns: prod, name: "db-0", strategy: "LiveMigrate", labels: map[string]any{"workload": "db"},
		migratable: map[string]any{"type": "LiveMigratable", "status": "True"},
		want: api.KubeVirtMigration{AllowPostCopy: true, AllowAutoConverge: true, AllowWorkloadDisruption: true,
			BandwidthBytesPerSecond: 1 << 30, CompletionTimeoutPerGiB: 300, ProgressTimeoutSeconds: 300, MaxDowntimeMs: 500,
			ParallelOutboundPerNode: 4, ParallelPerCluster: 5, Policy: "db-fast", Source: api.KubeVirtFromPolicy},
	}, {
		ns: prod, name: "db-1", strategy: "LiveMigrate", labels: map[string]any{"workload": "db"},
		migratable: map[string]any{"type": "LiveMigratable", "status": "True"},
		migrationState: map[string]any{
			"migrationUid": "0b1c2d3e-0000-4000-8000-000000000001", "sourceNode": "node-a", "targetNode": "node-b",
			"startTimestamp": "2026-12-01T03:40:00Z", "mode": "PreCopy", "migrationPolicyName": "db-fast",
			"migrationConfiguration": map[string]any{
				"allowAutoConverge": false, "allowPostCopy": true, "allowWorkloadDisruption": true, "bandwidthPerMigration": "64Mi",
				"completionTimeoutPerGiB": int64(40), "maxDowntimeMs": int64(300), "progressTimeout": int64(150),
				"parallelMigrationsPerCluster": int64(5), "parallelOutboundMigrationsPerNode": int64(2),
				"unsafeMigrationOverride": false, "nodeDrainTaintKey": "kubevirt.io/drain", "utilityVolumesTimeout": int64(150),
			},
		},
		want: api.KubeVirtMigration{AllowPostCopy: true, AllowWorkloadDisruption: true, BandwidthBytesPerSecond: 64 << 20,
			CompletionTimeoutPerGiB: 40, ProgressTimeoutSeconds: 150, MaxDowntimeMs: 300, ParallelOutboundPerNode: 4, ParallelPerCluster: 5,
			Policy: "db-fast", Source: api.KubeVirtFromVMIStatus},
	}, {
		// No strategy of its own: the cluster's, LiveMigrate.
		ns: prod, name: "gpu-0",
		migratable: map[string]any{"type": "LiveMigratable", "status": "False", "reason": "HostDeviceNotLiveMigratable",
			"message": "VMI uses a PCI host devices", "lastTransitionTime": "2026-12-01T03:00:00Z"},
		want: api.KubeVirtMigration{AllowPostCopy: true, AllowWorkloadDisruption: true, BandwidthBytesPerSecond: 8 << 20,
			CompletionTimeoutPerGiB: 800, ProgressTimeoutSeconds: 300, MaxDowntimeMs: 900, ParallelOutboundPerNode: 4, ParallelPerCluster: 5,
			Policy: "a-prod", Source: api.KubeVirtFromPolicy},
		block: &api.DrainBlock{EvictionStrategy: "LiveMigrate", Reason: "HostDeviceNotLiveMigratable", Message: "VMI uses a PCI host devices"},
	}, {
		ns: dev, name: "capk-0", strategy: "External", labels: map[string]any{"workload": "db"},
		migratable: map[string]any{"type": "LiveMigratable", "status": "True"},
		want: api.KubeVirtMigration{AllowPostCopy: true, AllowWorkloadDisruption: true, BandwidthBytesPerSecond: 256 << 20,
			CompletionTimeoutPerGiB: 800, ProgressTimeoutSeconds: 300, MaxDowntimeMs: 900, ParallelOutboundPerNode: 4, ParallelPerCluster: 5,
			Source: api.KubeVirtFromCluster},
		block: &api.DrainBlock{EvictionStrategy: "External", Reason: api.DrainBlockExternal},
	}, {
		ns: dev, name: "scratch-0", strategy: "LiveMigrateIfPossible",
		migratable: map[string]any{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
			"message": "cannot migrate VMI: PVC scratch is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"},
		want: api.KubeVirtMigration{AllowPostCopy: true, AllowWorkloadDisruption: true, BandwidthBytesPerSecond: 256 << 20,
			CompletionTimeoutPerGiB: 800, ProgressTimeoutSeconds: 300, MaxDowntimeMs: 900, ParallelOutboundPerNode: 4, ParallelPerCluster: 5,
			Source: api.KubeVirtFromCluster},
	}}
	for _, v := range vmis {
		createVMI(t, ctx, v.ns, v.name, v.strategy, v.labels, v.migratable, v.migrationState)
	}

	for _, v := range vmis {
		t.Run(v.name, func(t *testing.T) {
			stored, err := ferry.Resource(kubevirt.VMIResource).Namespace(v.ns).Get(ctx, v.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if v.migrationState != nil {
				got, _, _ := unstructured.NestedMap(stored.Object, "status", "migrationState")
				if !equalJSON(got, v.migrationState) {
					t.Errorf("status.migrationState did not survive the VMI CRD:\n got %v\nwant %v", got, v.migrationState)
				}
			}
			ns, err := ferryCore.CoreV1().Namespaces().Get(ctx, v.ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := kubevirt.EffectiveMigration(stored, cr, policies, ns.Labels); got != v.want {
				t.Errorf("EffectiveMigration:\n got %+v\nwant %+v", got, v.want)
			}
			block, blocks := kubevirt.DrainBlocker(stored, cr)
			if blocks != (v.block != nil) {
				t.Fatalf("DrainBlocker blocks = %v (%+v), want %v", blocks, block, v.block != nil)
			}
			if v.block != nil {
				if v.block.Reason == api.DrainBlockExternal {
					block.Message = ""
				}
				if block != *v.block {
					t.Errorf("DrainBlocker:\n got %+v\nwant %+v", block, *v.block)
				}
			}
		})
	}
}

// createConfig creates kubevirtConfig's objects, and deletes them when the test
// ends so that a later run against the same API server starts from none.
func createConfig(t *testing.T, ctx context.Context) {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(kubevirtConfig), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		r := srv.Dynamic.Resource(kubevirt.MigrationPolicyResource)
		var ri dynamic.ResourceInterface = r
		if u.GetKind() == "KubeVirt" {
			ri = srv.Dynamic.Resource(kubevirt.KubeVirtResource).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		t.Cleanup(func() {
			if err := ri.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}); err != nil {
				t.Errorf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
		})
	}
}

func labelledNamespace(t *testing.T, ctx context.Context, prefix string, labels map[string]string) string {
	t.Helper()
	ns, err := srv.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// createVMI stores a running VMI on node-a as virt-controller would have left it (the
// CRD has no status subresource, so a create keeps its status).
func createVMI(t *testing.T, ctx context.Context, ns, name, strategy string, labels, migratable, migrationState map[string]any) {
	t.Helper()
	l := map[string]any{kubevirt.NodeLabel: "node-a", "kubevirt.io/domain": name}
	for k, v := range labels {
		l[k] = v
	}
	spec := map[string]any{"domain": map[string]any{
		"devices":   map[string]any{},
		"resources": map[string]any{"requests": map[string]any{"memory": "8Gi"}},
	}}
	if strategy != "" {
		spec["evictionStrategy"] = strategy
	}
	status := map[string]any{
		"phase": "Running", "nodeName": "node-a",
		"conditions": []any{map[string]any{"type": "Ready", "status": "True"}, migratable},
	}
	if migrationState != nil {
		status["migrationState"] = migrationState
	}
	vmi := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name, "labels": l},
		"spec":     spec, "status": status,
	}}
	if _, err := srv.Dynamic.Resource(kubevirt.VMIResource).Namespace(ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(fmt.Errorf("VMI %s/%s: %w", ns, name, err))
	}
}
