//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/deploy"
	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/testbed"
)

func TestPostCopyFailureMarksTheVMIIrrecoverable(t *testing.T) {
	kubeUp(t)
	lostAtOnce(t)
	uid := createVMI(t, "pcvmi")
	guest(t, testbed.GuestSpec{Name: "default_pcvmi", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, VMIUID: uid})
	start := time.Now()
	failedAt := breakPostCopy(t, "default_pcvmi")

	before := getVMI(t, "pcvmi")
	markedAt := waitFor(t, "the VMI marked irrecoverable", 30*time.Second, func() bool {
		ok, _ := marked(t, getVMI(t, "pcvmi"))
		return ok
	})
	latency := markedAt.Sub(failedAt)
	t.Logf("VMI marked %v after libvirt's post-copy-failed event", latency.Round(time.Millisecond))
	if latency > 2*time.Second {
		t.Errorf("marking took %v (limit 2s)", latency)
	}
	u := getVMI(t, "pcvmi")
	_, f := marked(t, u)
	if f.Message != kubevirt.IrrecoverableMessage || f.MigrationUID != "mig-pcvmi" || (f.Node != "a" && f.Node != "b") ||
		(f.Side != "source" && f.Side != "target") || f.Reason == "" || f.Detected.IsZero() {
		t.Errorf("annotation %+v", f)
	}
	// Ferry never writes status or KubeVirt's labels (virt-api would revert them).
	if !jsonEqual(u.Object["status"], before.Object["status"]) {
		t.Errorf("status changed:\nbefore %v\nafter  %v", before.Object["status"], u.Object["status"])
	}
	if u.GetLabels()[kubevirt.NodeLabel] != "a" || u.GetLabels()[kubevirt.TargetNodeLabel] != "b" {
		t.Errorf("KubeVirt's labels changed: %v", u.GetLabels())
	}
	// What the on-call operator is paged with, rendered by Prometheus.
	waitAlert(t, "FerryVMIPostCopyFailed", "firing", 10*time.Second, "namespace=default", "name=pcvmi", "domain=default_pcvmi")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	firing, err := prom.Alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var paged int
	for _, a := range firing {
		if a.Labels["alertname"] == "FerryVMIPostCopyFailed" && a.Labels["name"] == "pcvmi" {
			paged++
			if want := "Post-copy migration of default/pcvmi failed on " + a.Labels["node"]; a.Annotations["summary"] != want || a.Annotations["runbook_url"] == "" {
				t.Errorf("alert annotations %v, want summary %q and a runbook_url", a.Annotations, want)
			}
		}
	}
	if paged == 0 {
		t.Errorf("FerryVMIPostCopyFailed for default/pcvmi not among Prometheus's alerts: %v", firing)
	}
	// Both nodes saw the failure; give the slower one time to try.
	time.Sleep(5 * time.Second)
	if n := postCopyEvents(t, "pcvmi"); n != 1 {
		t.Errorf("%d PostCopyFailed events, want exactly one", n)
	}
	var j api.Job
	ctlJSON(t, "a", &j, "job", "default_pcvmi")
	if j.VMI == nil || j.VMI.UID != string(u.GetUID()) || j.VMI.MigrationState == nil || j.VMI.MigrationState.MigrationUID != "mig-pcvmi" {
		t.Errorf("ferryctl job does not show the VMI: %+v", j.VMI)
	}
	// The target's ferryd sees the VMI by kubevirt.io/migrationTargetNodeName.
	var jb api.Job
	ctlJSON(t, "b", &jb, "job", "default_pcvmi")
	if jb.VMI == nil || jb.VMI.UID != string(u.GetUID()) || !jb.VMI.Irrecoverable {
		t.Errorf("ferryctl job on the target does not show the marked VMI: %+v", jb.VMI)
	}
	assertTruth(t, "default_pcvmi", "a", "b", start)
}

func TestMarkLandsAfterAnAPIOutage(t *testing.T) {
	kubeUp(t)
	lostAtOnce(t)
	for _, restart := range []bool{false, true} {
		name := "outage"
		if restart {
			name = "outage-restart"
		}
		t.Run(name, func(t *testing.T) {
			uid := createVMI(t, name)
			domain := "default_" + name
			guest(t, testbed.GuestSpec{Name: domain, MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 0, VMIUID: uid})
			if err := kube.StopAPIServer(); err != nil {
				t.Fatal(err)
			}
			down := time.Now()
			apiBack := false
			defer func() {
				if !apiBack {
					kube.StartAPIServer(context.Background())
				}
			}()
			start := time.Now()
			breakPostCopy(t, domain)
			waitFor(t, "the mark to wait on disk", 20*time.Second, func() bool {
				va, _ := ferryOn("a").metric("ferry_vmi_marks_pending")
				vb, _ := ferryOn("b").metric("ferry_vmi_marks_pending")
				return va+vb >= 1
			})
			if restart {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, n := range []string{"a", "b"} {
					if err := bed.RestartFerryd(ctx, n); err != nil {
						t.Fatal(err)
					}
				}
				waitFor(t, "the mark reloaded after the restart", 20*time.Second, func() bool {
					va, _ := ferryOn("a").metric("ferry_vmi_marks_pending")
					vb, _ := ferryOn("b").metric("ferry_vmi_marks_pending")
					return va+vb >= 1
				})
			}
			time.Sleep(time.Until(down.Add(30 * time.Second)))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := kube.StartAPIServer(ctx); err != nil {
				t.Fatal(err)
			}
			apiBack = true
			back := time.Now()
			landed := waitFor(t, "the mark to land", time.Minute, func() bool {
				u, err := kube.Dynamic.Resource(kubevirt.VMIResource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false
				}
				ok, _ := marked(t, u)
				return ok
			})
			t.Logf("API server away %v; mark landed %v after it came back", back.Sub(down).Round(time.Second), landed.Sub(back).Round(time.Millisecond))
			time.Sleep(5 * time.Second)
			if n := postCopyEvents(t, name); n != 1 {
				t.Errorf("%d PostCopyFailed events, want exactly one", n)
			}
			waitFor(t, "no marks pending", 20*time.Second, func() bool {
				va, _ := ferryOn("a").metric("ferry_vmi_marks_pending")
				vb, _ := ferryOn("b").metric("ferry_vmi_marks_pending")
				return va+vb == 0
			})
			assertTruth(t, domain, "a", "b", start)
		})
	}
}

func TestServiceAccountMayDoItsJobAndNothingMore(t *testing.T) {
	kubeUp(t)
	createVMI(t, "rbac")
	cfg := &rest.Config{Host: kube.URL, TLSClientConfig: rest.TLSClientConfig{CAData: kube.CAData}, BearerToken: ferryToken}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(kubevirt.VMIResource).Namespace("default")
	ctx := context.Background()
	if _, err := res.List(ctx, metav1.ListOptions{LabelSelector: kubevirt.NodeLabel + "=a"}); err != nil {
		t.Errorf("listing VMIs: %v", err)
	}
	if _, err := res.Patch(ctx, "rbac", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+kubevirt.IrrecoverableLabel+`":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("patching Ferry's label: %v", err)
	}
	if _, err := res.Patch(ctx, "rbac", types.MergePatchType, []byte(`{"status":{"evacuationNodeName":""}}`), metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		t.Errorf("patching /status: %v, want 403", err)
	}
	if err := res.Delete(ctx, "rbac", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting: %v, want 403", err)
	}
}

func daemonSet(t *testing.T) appsv1.DaemonSet {
	t.Helper()
	ds, err := deploy.DaemonSet()
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestFerrydRunsFromTheDaemonSetArgs(t *testing.T) {
	ds := daemonSet(t)
	c := ds.Spec.Template.Spec.Containers[0]
	kubeUp(t)
	kubeconfig := filepath.Join(bed.Dir(), "ds.kubeconfig")
	if err := writeTokenKubeconfig(kubeconfig, kube.URL, kube.CAData, ferryToken); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NODE_NAME": "ds-node", "KUBECONFIG": kubeconfig}
	var args []string
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		args = append(args, a)
	}
	// The DaemonSet's host paths, given to this ferryd in a private mount
	// namespace: fresh state and sockets.
	ferryd := filepath.Join(filepath.Dir(ferryctlBin), "ferryd")
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, d := range []string{"/run/ferry", "/var/lib/ferry"} {
		fmt.Fprintf(&script, "mkdir -p %s && mount -t tmpfs tmpfs %s\n", d, d)
	}
	script.WriteString(`exec "$0" "$@"` + "\n")
	cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", script.String(), ferryd}, args...)...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logPath := filepath.Join(t.TempDir(), "ferryd.log")
	logf, _ := os.Create(logPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("ferryd's log:\n%s", b)
		}
	}()
	port := ""
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			port = fmt.Sprint(p.ContainerPort)
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	waitFor(t, "ferryd's /metrics on the DaemonSet's port", 15*time.Second, func() bool {
		resp, err := hc.Get("http://127.0.0.1:" + port + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(body), "ferry_build_info")
	})
	resp, err := hc.Get("http://127.0.0.1:" + port + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("/healthz: %v %v\n%s", resp, err, log)
	}
	resp.Body.Close()
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), `"node":"ds-node"`) {
		t.Errorf("ferryd did not take NODE_NAME from the DaemonSet's env:\n%s", log)
	}
	// KubeVirt relays its own migrations; the DaemonSet leaves Ferry's off.
	if !strings.Contains(string(log), "migration proxy off") {
		t.Errorf("the DaemonSet's ferryd runs the migration proxy:\n%s", log)
	}
}
