package deploy

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

func daemonSet(t *testing.T) appsv1.DaemonSet {
	t.Helper()
	ds, err := DaemonSet()
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// The DaemonSet controller places a pod on a node when its required node
// affinity (nodeSelector included) matches; this is its own matcher.
// KubeVirt flips kubevirt.io/schedulable to "false" while virt-handler is
// down or stale, during upgrades and their migrations: ferryd stays.
func TestDaemonSetStaysOnANodeKubeVirtMarksUnschedulable(t *testing.T) {
	ds := daemonSet(t)
	pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
	match := nodeaffinity.GetRequiredNodeAffinity(pod)
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"kubevirt.io/schedulable": "true"}, true},
		{map[string]string{"kubevirt.io/schedulable": "false"}, true},
		{map[string]string{"kubernetes.io/hostname": "infra-1"}, false},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}}
		got, err := match.Match(node)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("node labelled %v: placed %v, want %v", tc.labels, got, tc.want)
		}
	}
}

// VM nodes are often tainted for their VMs alone; virt-handler reaches
// them through KubeVirt's nodePlacement, and ferryd must be there too.
func TestDaemonSetToleratesAVMNodesTaints(t *testing.T) {
	tolerations := daemonSet(t).Spec.Template.Spec.Tolerations
	taints := []corev1.Taint{
		{Key: "dedicated", Value: "vms", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/virtualization", Effect: corev1.TaintEffectNoExecute},
	}
	if taint, untolerated := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), taints, tolerations, nil, false); untolerated {
		t.Errorf("the DaemonSet does not tolerate %v", taint)
	}
}

// On KubeVirt nodes KubeVirt relays its own migrations: ferryd observes,
// advises and marks, with the launchers' sockets where virt-handler finds
// them, and runs under virt-handler's SELinux type.
func TestDaemonSetIsDeployedAsVirtHandlerIs(t *testing.T) {
	spec := daemonSet(t).Spec.Template.Spec
	c := spec.Containers[0]
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--proxy-") || strings.HasPrefix(a, "--migration-interface") {
			t.Errorf("argument %s: the proxy is off on KubeVirt nodes", a)
		}
		if strings.HasPrefix(a, "--libvirt-socket") {
			t.Errorf("argument %s: launchers are found from --kubelet-pods-dir", a)
		}
	}
	if !slices.Contains(c.Args, "--kubelet-pods-dir=/pods") {
		t.Errorf("args %v lack --kubelet-pods-dir=/pods", c.Args)
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		if m.MountPath != "/pods" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil && v.HostPath.Path == "/var/lib/kubelet/pods" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Error("the kubelet's /var/lib/kubelet/pods is not mounted at /pods")
	}
	if spec.HostNetwork {
		t.Error("hostNetwork: nothing of ferryd's needs the host's network with the proxy off")
	}
	se := spec.SecurityContext
	if se == nil || se.SELinuxOptions == nil || se.SELinuxOptions.Type != "spc_t" || se.SELinuxOptions.Level != "s0" {
		t.Errorf("pod SELinux options %+v, want virt-handler's spc_t at s0", se)
	}
	if caps := c.SecurityContext.Capabilities; caps == nil || !slices.Equal(caps.Add, []corev1.Capability{"DAC_OVERRIDE"}) {
		t.Errorf("capabilities %+v, want DAC_OVERRIDE alone", caps)
	}
}
