package kubevirt

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ferry-vm/ferry/api"
)

const mib = 1 << 20

// kubevirtCR is a KubeVirt CR as virt-operator leaves it, with
// spec.configuration.migrations set to migrations (none if nil).
func kubevirtCR(migrations map[string]any, evictionStrategy string) *unstructured.Unstructured {
	config := map[string]any{"developerConfiguration": map[string]any{"featureGates": []any{"Snapshot"}}}
	if migrations != nil {
		config["migrations"] = migrations
	}
	if evictionStrategy != "" {
		config["evictionStrategy"] = evictionStrategy
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt", "namespace": "kubevirt"},
		"spec":     map[string]any{"configuration": config, "imagePullPolicy": "IfNotPresent"},
		"status":   map[string]any{"phase": "Deployed", "observedKubeVirtVersion": "v1.9.0"},
	}}
}

// migrationPolicy is a MigrationPolicy with these selectors (nil: none)
// and spec fields.
func migrationPolicy(name string, selectors map[string]any, fields map[string]any) *unstructured.Unstructured {
	spec := map[string]any{}
	if selectors != nil {
		spec["selectors"] = selectors
	}
	for k, v := range fields {
		spec[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

func selectors(vmi, namespace map[string]any) map[string]any {
	s := map[string]any{}
	if vmi != nil {
		s["virtualMachineInstanceSelector"] = vmi
	}
	if namespace != nil {
		s["namespaceSelector"] = namespace
	}
	return s
}

// runningVMI is a VMI running on node-a as KubeVirt labels it, with extra
// labels and, if migrationState is not nil, that migration state.
func runningVMI(labels map[string]any, migrationState map[string]any) *unstructured.Unstructured {
	l := map[string]any{NodeLabel: "node-a", "kubevirt.io/domain": "db-0"}
	for k, v := range labels {
		l[k] = v
	}
	status := map[string]any{
		"phase": "Running", "nodeName": "node-a",
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "True"},
			map[string]any{"type": "LiveMigratable", "status": "True"},
		},
	}
	if migrationState != nil {
		status["migrationState"] = migrationState
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "db-0", "namespace": "prod", "labels": l},
		"spec": map[string]any{
			"evictionStrategy": "LiveMigrate",
			"domain":           map[string]any{"devices": map[string]any{}, "memory": map[string]any{"guest": "8Gi"}},
		},
		"status": status,
	}}
}

// inFlight is the migration state virt-controller writes at hand-off,
// with the configuration it resolved (bandwidth 64Mi, post-copy, a
// policy's completion timeout).
func inFlight() map[string]any {
	return map[string]any{
		"migrationUid": "0b1c2d3e-0000-4000-8000-000000000001", "sourceNode": "node-a", "targetNode": "node-b",
		"startTimestamp": "2026-12-01T03:40:00Z", "mode": "PreCopy",
		"migrationPolicyName": "db-fast",
		"migrationConfiguration": map[string]any{
			"allowAutoConverge": false, "allowPostCopy": true, "allowWorkloadDisruption": true,
			"bandwidthPerMigration": "64Mi", "completionTimeoutPerGiB": int64(40), "maxDowntimeMs": int64(300),
			"progressTimeout": int64(150), "parallelMigrationsPerCluster": int64(5), "parallelOutboundMigrationsPerNode": int64(2),
			"unsafeMigrationOverride": false, "nodeDrainTaintKey": "kubevirt.io/drain", "utilityVolumesTimeout": int64(150),
		},
	}
}

var defaults = api.KubeVirtMigration{CompletionTimeoutPerGiB: 150, ProgressTimeoutSeconds: 150, MaxDowntimeMs: 900,
	ParallelOutboundPerNode: 2, ParallelPerCluster: 5, Source: api.KubeVirtFromDefaults}

func TestEffectiveMigration(t *testing.T) {
	prod := map[string]string{"kubernetes.io/metadata.name": "prod", "tier": "prod", "region": "eu"}
	cluster := kubevirtCR(map[string]any{
		"bandwidthPerMigration": "256Mi", "completionTimeoutPerGiB": int64(800), "parallelOutboundMigrationsPerNode": int64(4),
		"allowPostCopy": true, "progressTimeout": int64(300),
	}, "LiveMigrate")
	// What cluster alone gives: allowWorkloadDisruption follows allowPostCopy.
	fromCluster := api.KubeVirtMigration{AllowPostCopy: true, AllowWorkloadDisruption: true, BandwidthBytesPerSecond: 256 * mib,
		CompletionTimeoutPerGiB: 800, ProgressTimeoutSeconds: 300, MaxDowntimeMs: 900, ParallelOutboundPerNode: 4, ParallelPerCluster: 5,
		Source: api.KubeVirtFromCluster}
	dbFast := migrationPolicy("db-fast", selectors(map[string]any{"workload": "db"}, map[string]any{"tier": "prod"}), map[string]any{
		"bandwidthPerMigration": "1Gi", "allowAutoConverge": true, "completionTimeoutPerGiB": int64(300), "maxDowntimeMs": int64(500),
		// Not a policy's to set: KubeVirt ignores it (the CRD prunes it).
		"progressTimeout": int64(10),
	})
	fromDBFast := fromCluster
	fromDBFast.BandwidthBytesPerSecond, fromDBFast.AllowAutoConverge, fromDBFast.CompletionTimeoutPerGiB, fromDBFast.MaxDowntimeMs = 1024*mib, true, 300, 500
	fromDBFast.Policy, fromDBFast.Source = "db-fast", api.KubeVirtFromPolicy

	with := func(m api.KubeVirtMigration, f func(*api.KubeVirtMigration)) api.KubeVirtMigration { f(&m); return m }
	done := inFlight()
	done["completed"], done["endTimestamp"] = true, "2026-12-01T03:42:00Z"
	failed := inFlight()
	failed["failed"] = true

	for _, tc := range []struct {
		name     string
		vmi      *unstructured.Unstructured
		cr       *unstructured.Unstructured
		policies []*unstructured.Unstructured
		nsLabels map[string]string
		want     api.KubeVirtMigration
	}{
		{name: "KubeVirt's defaults alone", vmi: runningVMI(nil, nil), want: defaults},
		{name: "a CR that sets no migration field", vmi: runningVMI(nil, nil), cr: kubevirtCR(map[string]any{}, "LiveMigrate"), want: defaults},
		{name: "a CR without a configuration", vmi: runningVMI(nil, nil),
			cr:   &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "spec": map[string]any{}}},
			want: defaults},
		{name: "the cluster's over the defaults", vmi: runningVMI(nil, nil), cr: cluster, want: fromCluster},
		{name: "the cluster's explicit allowWorkloadDisruption", vmi: runningVMI(nil, nil),
			cr: kubevirtCR(map[string]any{"allowPostCopy": true, "allowWorkloadDisruption": false, "maxDowntimeMs": int64(1200), "parallelMigrationsPerCluster": int64(10)}, ""),
			want: with(defaults, func(m *api.KubeVirtMigration) {
				m.AllowPostCopy, m.MaxDowntimeMs, m.ParallelPerCluster, m.Source = true, 1200, 10, api.KubeVirtFromCluster
			})},
		{name: "a policy matched by VMI and namespace labels", vmi: runningVMI(map[string]any{"workload": "db"}, nil), cr: cluster,
			policies: []*unstructured.Unstructured{dbFast}, nsLabels: prod, want: fromDBFast},
		{name: "a policy over KubeVirt's defaults", vmi: runningVMI(map[string]any{"workload": "db"}, nil),
			policies: []*unstructured.Unstructured{dbFast}, nsLabels: prod,
			want: with(defaults, func(m *api.KubeVirtMigration) {
				m.BandwidthBytesPerSecond, m.AllowAutoConverge, m.CompletionTimeoutPerGiB, m.MaxDowntimeMs = 1024*mib, true, 300, 500
				m.Policy, m.Source = "db-fast", api.KubeVirtFromPolicy
			})},
		{name: "a policy whose namespace label differs", vmi: runningVMI(map[string]any{"workload": "db"}, nil), cr: cluster,
			policies: []*unstructured.Unstructured{dbFast}, nsLabels: map[string]string{"tier": "dev"}, want: fromCluster},
		{name: "a policy whose VMI label is missing", vmi: runningVMI(nil, nil), cr: cluster,
			policies: []*unstructured.Unstructured{dbFast}, nsLabels: prod, want: fromCluster},
		{name: "a policy without selectors matches nothing", vmi: runningVMI(nil, nil), cr: cluster,
			policies: []*unstructured.Unstructured{migrationPolicy("all", nil, map[string]any{"allowAutoConverge": true})}, want: fromCluster},
		{name: "empty selectors match every VMI", vmi: runningVMI(nil, nil), cr: cluster,
			policies: []*unstructured.Unstructured{migrationPolicy("all", map[string]any{}, map[string]any{"allowAutoConverge": true})},
			want: with(fromCluster, func(m *api.KubeVirtMigration) {
				m.AllowAutoConverge, m.Policy, m.Source = true, "all", api.KubeVirtFromPolicy
			})},
		{name: "a policy's allowPostCopy carries allowWorkloadDisruption", vmi: runningVMI(map[string]any{"workload": "db"}, nil),
			cr:       kubevirtCR(map[string]any{"allowPostCopy": false, "allowWorkloadDisruption": false}, ""),
			policies: []*unstructured.Unstructured{migrationPolicy("pc", selectors(map[string]any{"workload": "db"}, nil), map[string]any{"allowPostCopy": true})},
			want: with(defaults, func(m *api.KubeVirtMigration) {
				m.AllowPostCopy, m.AllowWorkloadDisruption, m.Policy, m.Source = true, true, "pc", api.KubeVirtFromPolicy
			})},
		{name: "of two matching policies, the one with more matching labels", vmi: runningVMI(map[string]any{"workload": "db"}, nil), cr: cluster,
			policies: []*unstructured.Unstructured{
				migrationPolicy("a-prod", selectors(nil, map[string]any{"tier": "prod"}), map[string]any{"bandwidthPerMigration": "8Mi"}),
				dbFast,
			}, nsLabels: prod, want: fromDBFast},
		{name: "of two with as many labels, the one with more of the VMI's", vmi: runningVMI(map[string]any{"workload": "db", "app": "pg"}, nil), cr: cluster,
			policies: []*unstructured.Unstructured{
				migrationPolicy("a-ns", selectors(nil, map[string]any{"tier": "prod", "region": "eu"}), map[string]any{"bandwidthPerMigration": "8Mi"}),
				migrationPolicy("b-vmi", selectors(map[string]any{"workload": "db", "app": "pg"}, nil), map[string]any{"bandwidthPerMigration": "16Mi"}),
			}, nsLabels: prod,
			want: with(fromCluster, func(m *api.KubeVirtMigration) {
				m.BandwidthBytesPerSecond, m.Policy, m.Source = 16*mib, "b-vmi", api.KubeVirtFromPolicy
			})},
		{name: "of two with as many labels, more of the VMI's beats an earlier name", vmi: runningVMI(map[string]any{"workload": "db"}, nil), cr: cluster,
			policies: []*unstructured.Unstructured{
				migrationPolicy("zeta", selectors(map[string]any{"workload": "db"}, nil), map[string]any{"bandwidthPerMigration": "8Mi"}),
				migrationPolicy("alpha", selectors(nil, map[string]any{"tier": "prod"}), map[string]any{"bandwidthPerMigration": "16Mi"}),
			}, nsLabels: prod,
			want: with(fromCluster, func(m *api.KubeVirtMigration) {
				m.BandwidthBytesPerSecond, m.Policy, m.Source = 8*mib, "zeta", api.KubeVirtFromPolicy
			})},
		{name: "of two identical, the first by name", vmi: runningVMI(map[string]any{"workload": "db"}, nil), cr: cluster,
			policies: []*unstructured.Unstructured{
				migrationPolicy("beta", selectors(map[string]any{"workload": "db"}, nil), map[string]any{"bandwidthPerMigration": "8Mi"}),
				migrationPolicy("alpha", selectors(map[string]any{"workload": "db"}, nil), map[string]any{"bandwidthPerMigration": "16Mi"}),
			},
			want: with(fromCluster, func(m *api.KubeVirtMigration) {
				m.BandwidthBytesPerSecond, m.Policy, m.Source = 16*mib, "alpha", api.KubeVirtFromPolicy
			})},
		{name: "a VMI without labels matches any policy with selectors, as in KubeVirt",
			vmi: func() *unstructured.Unstructured { v := runningVMI(nil, nil); v.SetLabels(nil); return v }(), cr: cluster,
			policies: []*unstructured.Unstructured{dbFast}, nsLabels: map[string]string{"tier": "dev"}, want: fromDBFast},
		{name: "a migration under way: KubeVirt's record wins", vmi: runningVMI(map[string]any{"workload": "db"}, inFlight()), cr: cluster,
			policies: []*unstructured.Unstructured{dbFast}, nsLabels: prod,
			want: api.KubeVirtMigration{AllowPostCopy: true, AllowWorkloadDisruption: true, BandwidthBytesPerSecond: 64 * mib,
				CompletionTimeoutPerGiB: 40, ProgressTimeoutSeconds: 150, MaxDowntimeMs: 300,
				// The cluster's limits now, not the record's.
				ParallelOutboundPerNode: 4, ParallelPerCluster: 5,
				Policy: "db-fast", Source: api.KubeVirtFromVMIStatus}},
		{name: "a completed migration's record is the past", vmi: runningVMI(map[string]any{"workload": "db"}, done), cr: cluster,
			policies: []*unstructured.Unstructured{dbFast}, nsLabels: prod, want: fromDBFast},
		{name: "a failed migration's record is the past", vmi: runningVMI(nil, failed), cr: cluster, want: fromCluster},
		{name: "a record from an older KubeVirt", vmi: runningVMI(nil, map[string]any{
			"migrationUid": "m", "migrationConfiguration": map[string]any{
				"allowAutoConverge": true, "allowPostCopy": false, "bandwidthPerMigration": "0Mi", "completionTimeoutPerGiB": int64(150),
				"progressTimeout": int64(150), "unsafeMigrationOverride": false}}),
			cr: kubevirtCR(map[string]any{"maxDowntimeMs": int64(2000)}, ""),
			want: with(defaults, func(m *api.KubeVirtMigration) {
				// virt-handler's fallbacks: 900 ms, not the cluster's.
				m.AllowAutoConverge, m.Source = true, api.KubeVirtFromVMIStatus
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EffectiveMigration(tc.vmi, tc.cr, tc.policies, tc.nsLabels); got != tc.want {
				t.Errorf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// The bandwidth libvirt gets: KubeVirt hands it whole MiB/s.
func TestBandwidthAsKubeVirtHandsItToLibvirt(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want uint64
	}{
		{"0Mi", 0}, {"0", 0}, {"64Mi", 64 * mib}, {"1Gi", 1024 * mib},
		{int64(67108864), 64 * mib}, {float64(67108864), 64 * mib}, {"64M", 61 * mib}, {"100M", 95 * mib},
		{"1", mib}, {"512Ki", mib}, {"1536Ki", 2 * mib}, {"1536k", mib},
		// A quantity written with a fraction is not an exact int64 to
		// the API machinery, so KubeVirt takes one byte less.
		{"1.5Mi", mib}, {"0.5", 0},
		// Not a quantity KubeVirt applies: KubeVirt's default, unlimited.
		{"-1Mi", 0}, {"fast", 0}, {true, 0},
	} {
		got := EffectiveMigration(runningVMI(nil, nil), kubevirtCR(map[string]any{"bandwidthPerMigration": tc.in}, ""), nil, nil)
		if got.BandwidthBytesPerSecond != tc.want {
			t.Errorf("bandwidthPerMigration %#v: %d B/s (%.3f MiB/s), want %d MiB/s", tc.in, got.BandwidthBytesPerSecond,
				float64(got.BandwidthBytesPerSecond)/mib, tc.want/mib)
		}
	}
}
