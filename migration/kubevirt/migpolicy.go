package kubevirt

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// policyScore is how closely a MigrationPolicy fits a VMI: its selectors'
// labels that the VMI, and its namespace, carry.
type policyScore struct{ vmi, namespace int }

// beats is KubeVirt's order: more matching labels in all, then more of
// them the VMI's own.
func (s policyScore) beats(o policyScore) bool {
	if s.vmi+s.namespace != o.vmi+o.namespace {
		return s.vmi+s.namespace > o.vmi+o.namespace
	}
	return s.vmi > o.vmi
}

// matchPolicy picks the MigrationPolicy KubeVirt applies to a VMI with
// vmiLabels in a namespace with namespaceLabels, as virt-controller does
// (pkg/virt-controller/watch/migration/migrationpolicy.go): of the
// policies whose every selector label the VMI or its namespace carries,
// the best by policyScore, and of those that tie, the first by name. nil:
// none matches.
func matchPolicy(policies []*unstructured.Unstructured, vmiLabels, namespaceLabels map[string]string) *unstructured.Unstructured {
	var best *unstructured.Unstructured
	var bestScore policyScore
	for _, p := range policies {
		if p == nil {
			continue
		}
		score, ok := policyMatches(p, vmiLabels, namespaceLabels)
		if !ok {
			continue
		}
		if best == nil || score.beats(bestScore) || (!bestScore.beats(score) && p.GetName() < best.GetName()) {
			best, bestScore = p, score
		}
	}
	return best
}

// policyMatches says whether policy p applies, and how closely. A policy
// without spec.selectors applies to nothing; an empty one to every VMI.
func policyMatches(p *unstructured.Unstructured, vmiLabels, namespaceLabels map[string]string) (policyScore, bool) {
	sel, _, _ := unstructured.NestedMap(p.Object, "spec", "selectors")
	if sel == nil {
		return policyScore{}, false
	}
	count := func(selector map[string]string, labels map[string]string) (int, bool) {
		for k, v := range selector {
			if got, ok := labels[k]; !ok || got != v {
				return 0, false
			}
		}
		return len(selector), true
	}
	// KubeVirt checks either selector only when the VMI has labels at
	// all (its namespace's too, as written): a VMI without any matches
	// every policy with selectors, at the lowest score. KubeVirt labels
	// every VMI it runs, so this is rare; the advice follows it anyway.
	if vmiLabels == nil {
		return policyScore{}, true
	}
	var s policyScore
	var ok bool
	if vs, found, err := unstructured.NestedStringMap(sel, "virtualMachineInstanceSelector"); found && err == nil {
		if s.vmi, ok = count(vs, vmiLabels); !ok {
			return policyScore{}, false
		}
	}
	if ns, found, err := unstructured.NestedStringMap(sel, "namespaceSelector"); found && err == nil {
		if s.namespace, ok = count(ns, namespaceLabels); !ok {
			return policyScore{}, false
		}
	}
	return s, true
}
