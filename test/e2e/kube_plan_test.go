//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/testbed"
)

// TestPlanOnAKubeVirtNodeIsKubeVirtsAdvice runs two virt-launchers on node
// a, their VMIs on a real API server with KubeVirt's CR and a
// MigrationPolicy matching one of them: `ferryctl plan` predicts that one
// with the policy's figures (not ferryd's flags), and names the other,
// not live-migratable under LiveMigrate, as a VMI that would block a
// drain; neither gets a target, for KubeVirt moves them.
func TestPlanOnAKubeVirtNodeIsKubeVirtsAdvice(t *testing.T) {
	kubeUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := kube.InstallKubeVirtConfigCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kube.Apply(ctx, []byte("{apiVersion: v1, kind: Namespace, metadata: {name: kubevirt}}"), false); err != nil {
		t.Fatal(err)
	}
	cr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt", "namespace": "kubevirt"},
		"spec":     map[string]any{"configuration": map[string]any{"migrations": map[string]any{"completionTimeoutPerGiB": int64(100)}}}}}
	crs := kube.Dynamic.Resource(kubevirt.KubeVirtResource).Namespace("kubevirt")
	if _, err := crs.Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { crs.Delete(context.Background(), "kubevirt", metav1.DeleteOptions{}) })
	// KubeVirt reads only a CR virt-operator has deployed.
	if _, err := crs.Patch(ctx, "kubevirt", types.MergePatchType, []byte(`{"status":{"phase":"Deployed"}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	pol := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
		"metadata": map[string]any{"name": "ferry-advice"},
		"spec": map[string]any{"allowPostCopy": true, "allowWorkloadDisruption": true, "bandwidthPerMigration": "32Mi", "maxDowntimeMs": int64(400),
			"selectors": map[string]any{"virtualMachineInstanceSelector": map[string]any{"ferry-advice": "yes"}}}}}
	pols := kube.Dynamic.Resource(kubevirt.MigrationPolicyResource)
	if _, err := pols.Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pols.Delete(context.Background(), "ferry-advice", metav1.DeleteOptions{}) })

	vmis := kube.Dynamic.Resource(kubevirt.VMIResource).Namespace("default")
	var launchers []string
	for _, v := range []struct {
		name       string
		labels     map[string]any
		migratable map[string]any
	}{
		{"adv-ok", map[string]any{"ferry-advice": "yes"}, map[string]any{"type": "LiveMigratable", "status": "True"}},
		{"adv-stuck", nil, map[string]any{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
			"message": "cannot migrate VMI: PVC scratch is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"}},
	} {
		labels := map[string]any{kubevirt.NodeLabel: "a"}
		for k, x := range v.labels {
			labels[k] = x
		}
		pod := uuid.NewString()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
			"metadata": map[string]any{"name": v.name, "labels": labels},
			"spec":     map[string]any{"evictionStrategy": "LiveMigrate", "domain": map[string]any{"devices": map[string]any{}}},
			"status": map[string]any{"phase": "Running", "nodeName": "a", "activePods": map[string]any{pod: "a"},
				"conditions": []any{map[string]any{"type": "Ready", "status": "True"}, v.migratable}}}}
		got, err := vmis.Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vmis.Delete(context.Background(), v.name, metav1.DeleteOptions{}) })
		l, err := bed.StartLauncher(ctx, testbed.LauncherSpec{Node: "a", Namespace: "default", Name: v.name, VMIUID: string(got.GetUID()), PodUID: pod,
			MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Stop() })
		launchers = append(launchers, l.Domain)
	}
	// ferryd as the DaemonSet runs it, finding the launchers itself, with
	// node flags that are not what KubeVirt will do.
	args, caps := daemonSetArgs(t)
	args = append(args, "--dirty-rate-period", "5s", "--dirty-rate-sample", "2s", "--policy", "act", "--max-downtime-ms", "2000")
	if err := bed.SetFerrydOwnArgs(ctx, caps, args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.SetFerrydOwnArgs(context.Background(), nil); err != nil {
			t.Errorf("restoring the bed's ferryds: %v", err)
		}
	})
	waitMeasured(t, 3, launchers[:1]...)

	out, err := exec.Command(ferryctlBin, "--socket", bed.Node("a").DebugSocket, "-o", "json", "plan", "--bandwidth-mibs", "256").Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("ferryctl plan with a VMI that blocks a drain: %v, want exit status 1\n%s", err, out)
	}
	var p api.Plan
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("ferryctl plan -o json: %v\n%s", err, out)
	}
	entry := func(domain string) api.PlanEntry {
		i := slices.IndexFunc(p.Entries, func(e api.PlanEntry) bool { return e.Domain == domain })
		if i < 0 {
			t.Fatalf("no plan entry for %s: %+v", domain, p.Entries)
		}
		return p.Entries[i]
	}
	ok, stuck := entry(launchers[0]), entry(launchers[1])
	t.Logf("%s: kubevirt %+v, prediction %+v", ok.Domain, ok.KubeVirt, ok.Prediction)
	t.Logf("%s: drain block %+v", stuck.Domain, stuck.DrainBlock)
	switch k := ok.KubeVirt; {
	case k == nil || k.Policy != "ferry-advice" || k.Source != api.KubeVirtFromPolicy || k.MaxDowntimeMs != 400 || k.CompletionTimeoutPerGiB != 100:
		t.Errorf("%s: KubeVirt's configuration %+v, want the policy's over the cluster's", ok.Domain, k)
	case ok.Prediction == nil || ok.Prediction.MaxDowntimeMs != 400 || ok.Prediction.BandwidthBytesPerSecond != 32<<20:
		// ferryd runs with --max-downtime-ms 2000 and the plan was asked
		// for 256 MiB/s: neither is what KubeVirt will do.
		t.Errorf("%s: predicted with %+v, want the policy's 400 ms and 32 MiB/s", ok.Domain, ok.Prediction)
	case ok.Target != "" || ok.DrainBlock != nil:
		t.Errorf("%s: target %q, drain block %+v; want neither", ok.Domain, ok.Target, ok.DrainBlock)
	}
	if b := stuck.DrainBlock; b == nil || b.Reason != "DisksNotLiveMigratable" || b.EvictionStrategy != "LiveMigrate" || stuck.Migratable {
		t.Errorf("%s: drain block %+v, migratable %v; want DisksNotLiveMigratable under LiveMigrate", stuck.Domain, b, stuck.Migratable)
	}
	if p.DrainBlocked != 1 {
		t.Errorf("the plan counts %d VMIs blocking a drain, want 1", p.DrainBlocked)
	}
}
