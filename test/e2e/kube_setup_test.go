//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/kube/kubeapi"
	"github.com/ferry-vm/ferry/test/testbed"
)

// The API server is started once, by the first test that needs it, and
// stopped by TestMain.
var (
	kubeOnce   sync.Once
	kube       *kubeapi.Server
	kubeErr    error
	ferryToken string
)

// kubeUp starts etcd + kube-apiserver, applies deploy/'s namespace, RBAC and
// admission policy for real, and restarts both ferryds with a kubeconfig
// holding a token of deploy/'s ServiceAccount: ferryd works with exactly
// those rights.
func kubeUp(t *testing.T) *kubeapi.Server {
	t.Helper()
	kubeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		start := time.Now()
		kube, kubeErr = kubeapi.Start(ctx, kubeapi.Options{Log: os.Stderr})
		if kubeErr != nil {
			return
		}
		t.Logf("etcd + kube-apiserver ready in %.1fs at %s", time.Since(start).Seconds(), kube.URL)
		for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission.yaml"} {
			b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", f))
			if err != nil {
				kubeErr = err
				return
			}
			if kubeErr = kube.Apply(ctx, b, false); kubeErr != nil {
				return
			}
		}
		if ferryToken, kubeErr = kube.ServiceAccountToken(ctx, "ferry-system", "ferry", 2*time.Hour); kubeErr != nil {
			return
		}
		nodeURL, err := bed.ExposeAPIServer(strings.TrimPrefix(kube.URL, "https://"))
		if err != nil {
			kubeErr = err
			return
		}
		path := filepath.Join(bed.Dir(), "ferry.kubeconfig")
		if kubeErr = writeTokenKubeconfig(path, nodeURL, kube.CAData, ferryToken); kubeErr != nil {
			return
		}
		kubeErr = bed.SetFerrydArgs(ctx, "--kubeconfig", path)
	})
	if kubeErr != nil {
		t.Fatalf("API server: %v", kubeErr)
	}
	return kube
}

func stopKube() {
	if kube != nil {
		kube.Stop()
	}
}

func writeTokenKubeconfig(path, server string, ca []byte, token string) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["kube"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	c.AuthInfos["ferry"] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts["ferry"] = &clientcmdapi.Context{Cluster: "kube", AuthInfo: "ferry"}
	c.CurrentContext = "ferry"
	return clientcmd.WriteToFile(*c, path)
}

func repoRoot(t *testing.T) string {
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// createVMI creates a VMI on node a with conditions other writers own, and
// a migrationState as KubeVirt's controller would have set it. KubeVirt's
// CRD has no status subresource: the status goes in with the create.
func createVMI(t *testing.T, name string) string { return createVMIWithPods(t, name, nil) }

// createVMIWithPods is createVMI with KubeVirt's activePods (pod UID ->
// node), and returns the UID the API server gave the VMI.
func createVMIWithPods(t *testing.T, name string, activePods map[string]any) string {
	t.Helper()
	ctx := context.Background()
	res := kube.Dynamic.Resource(kubevirt.VMIResource).Namespace("default")
	u := kubeapi.MigratingVMI(name, "a", "b", "PreCopy")
	if activePods != nil {
		unstructured.SetNestedMap(u.Object, activePods, "status", "activePods")
	}
	got, err := res.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating VMI %s: %v", name, err)
	}
	t.Cleanup(func() { res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return string(got.GetUID())
}

func getVMI(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := kube.Dynamic.Resource(kubevirt.VMIResource).Namespace("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("VMI %s: %v", name, err)
	}
	return u
}

// marked reports whether Ferry's label is on the VMI, and decodes its annotation.
func marked(t *testing.T, u *unstructured.Unstructured) (bool, kubevirt.Failure) {
	t.Helper()
	var f kubevirt.Failure
	if u.GetLabels()[kubevirt.IrrecoverableLabel] != "true" {
		return false, f
	}
	if err := json.Unmarshal([]byte(u.GetAnnotations()[kubevirt.FailureAnnotation]), &f); err != nil {
		t.Errorf("annotation %s: %v", kubevirt.FailureAnnotation, err)
	}
	return true, f
}

// postCopyEvents counts the PostCopyFailed Events on a VMI.
func postCopyEvents(t *testing.T, name string) int {
	t.Helper()
	return vmiEvents(t, name, "PostCopyFailed", "Warning")
}

// vmiEvents counts Ferry's Events of reason on the VMI, all of type typ.
func vmiEvents(t *testing.T, name, reason, typ string) int {
	t.Helper()
	evs, err := kube.Clientset.CoreV1().Events("default").List(context.Background(),
		metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.ReportingController != "ferry" || e.Type != typ {
			t.Errorf("event %s: controller %q type %q", e.Name, e.ReportingController, e.Type)
		}
		n += int(max(e.Count, 1))
	}
	return n
}

// lostAtOnce has both ferryds declare a broken post-copy lost at once, as
// KubeVirt does: virt-handler destroys a paused source itself, and Ferry
// resumes only the migrations it drives.
func lostAtOnce(t *testing.T) { ferrydArgs(t, "--postcopy-recovery-timeout", "0") }

// breakPostCopy runs a migration into post-copy and breaks it; it returns
// when libvirt on the source has reported the failure, with that time.
func breakPostCopy(t *testing.T, domain string) time.Time {
	t.Helper()
	evA := watchLifecycle(t, "a", domain)
	done := migrateAsync(t, testbed.MigrateSpec{Name: domain, From: "a", To: "b", PostCopyAfter: 3 * time.Second, BandwidthMiBs: holdMiBs, PostCopyBandwidthMiBs: 32})
	waitEvent(t, evA, 3, 7, 2*time.Minute)
	time.Sleep(time.Second)
	if err := bed.ResetMigration(); err != nil {
		t.Fatalf("reset-migration: %v", err)
	}
	at := waitEvent(t, evA, 3, 8, time.Minute)
	go func() { <-done }()
	return at
}
