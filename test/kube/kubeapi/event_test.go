//go:build kube

package kubeapi_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

func TestWarningEvent(t *testing.T) {
	ctx := kubeapi.Context(t, 2*time.Minute)
	ns := srv.Namespace(t, ctx, "events")
	vmi := newVMI(t, ctx, ns, "vm1")

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: srv.Clientset.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ferry", Host: "node-a"})
	recorder.Eventf(vmi, corev1.EventTypeWarning, "MigrationFailed", "migration %s failed: %s", "a9b7c4e2", "target unreachable")

	// The recorder sends asynchronously.
	kubeapi.Eventually(t, ctx, "Warning event", func() error {
		list, err := srv.Clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=vm1,involvedObject.kind=VirtualMachineInstance",
		})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d events", len(list.Items))
		}
		e := list.Items[0]
		if e.Type != corev1.EventTypeWarning || e.Reason != "MigrationFailed" ||
			e.Message != "migration a9b7c4e2 failed: target unreachable" ||
			e.InvolvedObject.APIVersion != "kubevirt.io/v1" || e.InvolvedObject.UID != vmi.GetUID() ||
			e.Source.Component != "ferry" {
			t.Fatalf("event = %+v", e)
		}
		return nil
	})
}
