package kubevirt

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ferry-vm/ferry/api"
)

// vmiOnDrain is a running VMI with eviction strategy strategy ("": none
// of its own) and a LiveMigratable condition of status migratable
// ("": none), with KubeVirt's reason and message when False.
func vmiOnDrain(strategy, migratable string) *unstructured.Unstructured {
	v := runningVMI(nil, nil)
	if strategy == "" {
		unstructured.RemoveNestedField(v.Object, "spec", "evictionStrategy")
	} else {
		unstructured.SetNestedField(v.Object, strategy, "spec", "evictionStrategy")
	}
	conds := []any{map[string]any{"type": "Ready", "status": "True"}}
	switch migratable {
	case "True":
		conds = append(conds, map[string]any{"type": "LiveMigratable", "status": "True"})
	case "False":
		conds = append(conds, map[string]any{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
			"message": "cannot migrate VMI: PVC data is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"})
	}
	unstructured.SetNestedSlice(v.Object, conds, "status", "conditions")
	return v
}

func TestDrainBlocker(t *testing.T) {
	disks := api.DrainBlock{EvictionStrategy: "LiveMigrate", Reason: "DisksNotLiveMigratable",
		Message: "cannot migrate VMI: PVC data is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"}
	external := api.DrainBlock{EvictionStrategy: "External", Reason: api.DrainBlockExternal}
	succeeded := vmiOnDrain("LiveMigrate", "False")
	unstructured.SetNestedField(succeeded.Object, "Succeeded", "status", "phase")
	for _, tc := range []struct {
		name  string
		vmi   *unstructured.Unstructured
		cr    *unstructured.Unstructured
		block bool
		want  api.DrainBlock
	}{
		{name: "LiveMigrate, not migratable: refused for good", vmi: vmiOnDrain("LiveMigrate", "False"), block: true, want: disks},
		{name: "LiveMigrate, migratable: migrated, the drain waits for it", vmi: vmiOnDrain("LiveMigrate", "True")},
		{name: "LiveMigrate, no condition yet: virt-api refuses", vmi: vmiOnDrain("LiveMigrate", ""), block: true,
			want: api.DrainBlock{EvictionStrategy: "LiveMigrate", Reason: api.DrainBlockNotMigratable,
				Message: "VMI db-0 is configured with an eviction strategy but is not live-migratable"}},
		{name: "LiveMigrateIfPossible, not migratable: stopped", vmi: vmiOnDrain("LiveMigrateIfPossible", "False")},
		{name: "LiveMigrateIfPossible, migratable: migrated", vmi: vmiOnDrain("LiveMigrateIfPossible", "True")},
		{name: "External: always refused", vmi: vmiOnDrain("External", "True"), block: true, want: external},
		{name: "None: stopped", vmi: vmiOnDrain("None", "False")},
		{name: "the cluster's strategy when the VMI has none", vmi: vmiOnDrain("", "False"), cr: kubevirtCR(nil, "LiveMigrate"), block: true, want: disks},
		{name: "the VMI's strategy over the cluster's", vmi: vmiOnDrain("None", "False"), cr: kubevirtCR(nil, "LiveMigrate")},
		{name: "KubeVirt's default, None", vmi: vmiOnDrain("", "False"), cr: kubevirtCR(nil, "")},
		{name: "no KubeVirt CR: KubeVirt's default", vmi: vmiOnDrain("", "False")},
		{name: "a finished VMI has no pod to refuse", vmi: succeeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, block := DrainBlocker(tc.vmi, tc.cr)
			if block != tc.block {
				t.Fatalf("blocks = %v, want %v (%+v)", block, tc.block, got)
			}
			if tc.want.Reason == api.DrainBlockExternal {
				// The explanation is Ferry's own words; the code is the contract.
				if got.Message == "" {
					t.Error("no message")
				}
				got.Message = ""
			}
			if got != tc.want {
				t.Errorf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
