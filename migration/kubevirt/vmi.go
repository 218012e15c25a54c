// Package kubevirt connects Ferry's migration jobs to KubeVirt's
// VirtualMachineInstances: it reads the VMIs of this node (eviction,
// migration state, pods) and, when post-copy fails, marks the VMI
// irrecoverable on the API server, durably, exactly once in effect.
package kubevirt

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ferry-vm/ferry/api"
)

// VMIResource is KubeVirt's VirtualMachineInstance resource.
var VMIResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

// NodeLabel is the label KubeVirt sets to the node a VMI runs on; during a
// migration it still names the source until the hand-off.
const NodeLabel = "kubevirt.io/nodeName"

// TargetNodeLabel is the label KubeVirt sets to the target node while a VMI
// migrates: without it the target's ferryd would not see the VMI of its
// incoming migration.
const TargetNodeLabel = "kubevirt.io/migrationTargetNodeName"

// IrrecoverableMessage is KubeVirt's own text for this state, so tools that
// look for it find it.
const IrrecoverableMessage = "VMI is irrecoverable due to failed post-copy migration"

// Ferry marks a VMI in its metadata, never in its status: the VMI CRD has
// no status subresource, and virt-api's webhook puts the old status back for
// anyone but KubeVirt's own service accounts. Labels and annotations of
// one's own are open to others.
const (
	// IrrecoverableLabel is "true" on a VMI whose post-copy migration failed;
	// a label so that it can be selected (kubectl get vmi -l ...).
	IrrecoverableLabel = "ferry-vm.io/migration-irrecoverable"
	// FailureAnnotation holds the Failure, as JSON: why, where, when.
	FailureAnnotation = "ferry-vm.io/migration-failure"
	// RecoveryAnnotation holds, as JSON, where the recovery of a broken
	// post-copy stands while Ferry resumes it (a condition, in metadata).
	RecoveryAnnotation = "ferry-vm.io/migration-recovery"
)

// infoFrom reads what a job shows of its VMI from the unstructured object.
func infoFrom(u *unstructured.Unstructured) *api.VMIInfo {
	v := &api.VMIInfo{Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID())}
	v.Phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
	v.EvacuationNodeName, _, _ = unstructured.NestedString(u.Object, "status", "evacuationNodeName")
	v.NodeName, _, _ = unstructured.NestedString(u.Object, "status", "nodeName")
	if pods, ok, _ := unstructured.NestedStringMap(u.Object, "status", "activePods"); ok {
		v.ActivePods = pods
	}
	v.Irrecoverable = u.GetLabels()[IrrecoverableLabel] == "true"
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "EvictionRequested" && m["status"] == "True" {
			v.EvictionRequested = true
		}
	}
	if ms, ok, _ := unstructured.NestedMap(u.Object, "status", "migrationState"); ok && ms != nil {
		s := &api.VMIMigrationState{}
		str := func(k string) string { x, _ := ms[k].(string); return x }
		b := func(k string) bool { x, _ := ms[k].(bool); return x }
		s.SourceNode, s.TargetNode, s.SourcePod, s.TargetPod = str("sourceNode"), str("targetNode"), str("sourcePod"), str("targetPod")
		s.MigrationUID, s.Mode, s.AbortStatus, s.FailureReason = str("migrationUid"), str("mode"), str("abortStatus"), str("failureReason")
		s.AbortRequested, s.Completed, s.Failed = b("abortRequested"), b("completed"), b("failed")
		v.MigrationState = s
	}
	return v
}
