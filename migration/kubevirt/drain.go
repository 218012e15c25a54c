package kubevirt

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ferry-vm/ferry/api"
)

// KubeVirt's eviction strategies, what each does when a drain evicts the
// VMI's virt-launcher pod (virt-api's pod eviction admitter):
const (
	// EvictionNone: the pod is evicted; the VMI stops, and its
	// VirtualMachine's run strategy decides what follows. KubeVirt's
	// default for the cluster.
	EvictionNone = "None"
	// EvictionLiveMigrate: the eviction is refused while KubeVirt
	// migrates the VMI away; if the VMI cannot live-migrate, it is
	// refused for good, and the drain is stuck.
	EvictionLiveMigrate = "LiveMigrate"
	// EvictionLiveMigrateIfPossible: LiveMigrate if the VMI can
	// live-migrate, else None.
	EvictionLiveMigrateIfPossible = "LiveMigrateIfPossible"
	// EvictionExternal: the eviction is always refused; KubeVirt only
	// marks the VMI for evacuation, for another controller to act on.
	EvictionExternal = "External"
)

// EvictionStrategy is the strategy KubeVirt applies to vmi on a drain:
// its own, else the KubeVirt CR's spec.configuration.evictionStrategy,
// else KubeVirt's default, None. virt-api copies the cluster's into each
// VMI it admits, so a change of the cluster's reaches only later VMIs.
func EvictionStrategy(vmi, kubevirtCR *unstructured.Unstructured) string {
	if s, found, err := unstructured.NestedString(vmi.Object, "spec", "evictionStrategy"); found && err == nil {
		return s
	}
	if kubevirtCR != nil {
		if s, found, err := unstructured.NestedString(kubevirtCR.Object, "spec", "configuration", "evictionStrategy"); found && err == nil {
			return s
		}
	}
	return EvictionNone
}

// DrainBlocker says whether vmi would hold up a drain of its node, and
// why: KubeVirt refuses its pod's eviction for as long as nothing
// changes, which a drain retries without end. That is a VMI with
// strategy LiveMigrate that is not live-migratable (its LiveMigratable
// condition is not True; the condition's reason and message say why), and
// any VMI with strategy External. A migratable LiveMigrate VMI only
// delays the drain by its migration; a LiveMigrateIfPossible one that
// cannot migrate, or a None one, is stopped, and a VMI that has finished
// (Succeeded, Failed) has no pod left to refuse.
func DrainBlocker(vmi, kubevirtCR *unstructured.Unstructured) (api.DrainBlock, bool) {
	phase, _, _ := unstructured.NestedString(vmi.Object, "status", "phase")
	if phase == "Succeeded" || phase == "Failed" {
		return api.DrainBlock{}, false
	}
	strategy := EvictionStrategy(vmi, kubevirtCR)
	switch strategy {
	case EvictionExternal:
		return api.DrainBlock{EvictionStrategy: strategy, Reason: api.DrainBlockExternal,
			Message: "KubeVirt refuses to evict the VMI's pod and only marks it for evacuation (status.evacuationNodeName); the drain waits until another controller removes the VMI"}, true
	case EvictionLiveMigrate:
		status, reason, message := condition(vmi, "LiveMigratable")
		if status == "True" {
			return api.DrainBlock{}, false
		}
		if reason == "" {
			reason = api.DrainBlockNotMigratable
		}
		if message == "" {
			// virt-api's own refusal.
			message = fmt.Sprintf("VMI %s is configured with an eviction strategy but is not live-migratable", vmi.GetName())
		}
		return api.DrainBlock{EvictionStrategy: strategy, Reason: reason, Message: message}, true
	}
	return api.DrainBlock{}, false
}

// condition returns the status, reason and message of vmi's condition of
// type typ; all empty when it has none.
func condition(vmi *unstructured.Unstructured, typ string) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(vmi.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if t, _ := m["type"].(string); t != typ {
			continue
		}
		status, _ = m["status"].(string)
		reason, _ = m["reason"].(string)
		message, _ = m["message"].(string)
		return
	}
	return
}
