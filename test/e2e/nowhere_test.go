//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/prometheus/common/model"

	"github.com/ferry-vm/ferry/deploy"
	"github.com/ferry-vm/ferry/migration/kubevirt"
	"github.com/ferry-vm/ferry/test/testbed"
)

const nowhereAlert = "FerryVMIRunningNowhere"

// Two VMIs are scheduled to node a and then set Running there by KubeVirt,
// through the real API server (the VMI CRD has no status subresource:
// KubeVirt's own service account updates the object). One has no domain on
// any node: the bed's Prometheus, evaluating deploy/'s rule with its
// shipped `for`, holds FerryVMIRunningNowhere pending for it and fires it
// once that `for` has passed, not before, with labels naming the VMI. The
// other's guest runs on a with the VMI's UID in its KubeVirt metadata, as
// virt-launcher writes it: its alert is never pending, let alone firing.
// Once the lost VMI's guest runs, its alert resolves.
func TestAVMIRunningNowhereFiresAndOneWhoseGuestRunsDoesNot(t *testing.T) {
	kubeUp(t)
	forDur := nowhereFor(t)
	kv := dynamic.NewForConfigOrDie(kube.KubeVirtConfig()).Resource(kubevirt.VMIResource).Namespace("default")
	const lost, here = "nowhere", "nowhere-here"
	testStart := time.Now()
	lostUID, hereUID := pendingVMI(t, lost), pendingVMI(t, here)
	for _, n := range []string{lost, here} {
		kubeVirtPatch(t, kv, n, `{"metadata":{"labels":{"`+kubevirt.NodeLabel+`":"a"}},"status":{"phase":"Scheduled","nodeName":"a"}}`)
	}

	// The control's guest, started as virt-launcher starts it: the domain
	// namespace_name, the VMI's UID in KubeVirt's metadata.
	guest(t, testbed.GuestSpec{Name: "default_" + here, MemoryMiB: 128, DirtyMiB: 8, DirtyRateMiBs: -1, VMIUID: hereUID})
	waitFor(t, "Prometheus to see the control's domain on a carrying its VMI's UID", 30*time.Second, func() bool {
		s, err := promQuery(fmt.Sprintf(`ferry_domain_active{node="a", vmi_uid=%q, namespace="default", name=%q}`, hereUID, here))
		return err == nil && len(s) == 1
	})
	// Scheduled is not Running: neither VMI is expected yet.
	for _, uid := range []string{lostUID, hereUID} {
		if _, ok := ferryOn("a").metric("ferry_vmi_expected", `vmi_uid="`+uid+`"`); ok {
			t.Errorf("ferryd on a expects VMI %s while it is only Scheduled", uid)
		}
	}

	// virt-handler: the guests run.
	for _, n := range []string{here, lost} {
		kubeVirtPatch(t, kv, n, `{"status":{"phase":"Running"}}`)
	}
	running := time.Now()
	for _, v := range []struct{ name, uid string }{{lost, lostUID}, {here, hereUID}} {
		seen := waitFor(t, "ferryd on a to expect VMI "+v.name, 10*time.Second, func() bool {
			x, ok := ferryOn("a").metric("ferry_vmi_expected", `node="a"`, `vmi_uid="`+v.uid+`"`, `namespace="default"`, `name="`+v.name+`"`)
			return ok && x == 1
		})
		t.Logf("ferryd on a expects %s %v after KubeVirt set it Running", v.name, seen.Sub(running).Round(time.Millisecond))
		if _, ok := ferryOn("b").metric("ferry_vmi_expected", `vmi_uid="`+v.uid+`"`); ok {
			t.Errorf("ferryd on b expects VMI %s, Running on a", v.name)
		}
	}

	pendingAt, _ := waitAlert(t, nowhereAlert, "pending", 15*time.Second, "vmi_uid="+lostUID)
	t.Logf("%s pending for %s %v after it was set Running", nowhereAlert, lost, pendingAt.Sub(running).Round(time.Millisecond))
	activeAt := alertActiveAt(t, lostUID)
	firedAt, labels := waitAlert(t, nowhereAlert, "firing", time.Until(running.Add(forDur+20*time.Second)), "vmi_uid="+lostUID)
	t.Logf("%s firing for %s %v after it was set Running, %v after Prometheus's activeAt (for: %v)",
		nowhereAlert, lost, firedAt.Sub(running).Round(time.Millisecond), firedAt.Sub(activeAt).Round(time.Millisecond), forDur)
	if firedAt.Sub(running) < forDur || firedAt.Sub(activeAt) < forDur {
		t.Errorf("fired %v after the VMI was set Running (%v after activeAt), before its `for` of %v",
			firedAt.Sub(running), firedAt.Sub(activeAt), forDur)
	}
	if late := firedAt.Sub(running) - forDur; late > 10*time.Second {
		t.Errorf("fired %v later than its `for` after the VMI was set Running", late)
	}
	want := map[string]string{"__name__": "ALERTS", "alertname": nowhereAlert, "alertstate": "firing", "severity": "critical",
		"node": "a", "namespace": "default", "name": lost, "vmi_uid": lostUID}
	if !jsonEqual(labels, want) {
		t.Errorf("ALERTS labels %v, want exactly %v", labels, want)
	}

	// Prometheus's own /api/v1/alerts: the lost VMI firing, with the
	// page the operator reads; the control not there at all.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := prom.Alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var paged int
	for _, a := range all {
		if a.Labels["alertname"] != nowhereAlert {
			continue
		}
		switch a.Labels["vmi_uid"] {
		case lostUID:
			paged++
			summary := "VMI default/" + lost + " is Running on a as the API server says, yet no node runs its guest"
			if a.State != "firing" || a.Labels["name"] != lost || a.Labels["node"] != "a" || a.Annotations["summary"] != summary ||
				a.Annotations["runbook_url"] == "" || a.Annotations["runbook"] == "" {
				t.Errorf("/api/v1/alerts: %+v, want it firing on a with summary %q, a runbook and its URL", a, summary)
			}
		case hereUID:
			t.Errorf("/api/v1/alerts holds %s for %s, whose guest runs on a: %+v", nowhereAlert, here, a)
		}
	}
	if paged != 1 {
		t.Errorf("/api/v1/alerts: %d %s alerts for %s, want one; all: %+v", paged, nowhereAlert, lost, all)
	}

	// Its guest runs at last: the alert resolves.
	guest(t, testbed.GuestSpec{Name: "default_" + lost, MemoryMiB: 128, DirtyMiB: 8, DirtyRateMiBs: -1, VMIUID: lostUID})
	started := time.Now()
	resolved := waitFor(t, nowhereAlert+" for "+lost+" to resolve once its guest runs", 20*time.Second, func() bool {
		s, err := alerts(nowhereAlert, "firing", "vmi_uid="+lostUID)
		if err != nil || len(s) > 0 {
			return false
		}
		p, err := alerts(nowhereAlert, "pending", "vmi_uid="+lostUID)
		return err == nil && len(p) == 0
	})
	t.Logf("%s for %s resolved %v after its guest was up", nowhereAlert, lost, resolved.Sub(started).Round(time.Millisecond))
	if s, err := promQuery(fmt.Sprintf(`ferry_domain_active{node="a", vmi_uid=%q}`, lostUID)); err != nil || len(s) != 1 {
		t.Errorf("resolved, but Prometheus does not see the guest on a with the VMI's UID: %v %v", s, err)
	}
	if s, err := promQuery(fmt.Sprintf(`ferry_vmi_expected{node="a", vmi_uid=%q}`, lostUID)); err != nil || len(s) != 1 {
		t.Errorf("resolved, but not by its guest: Prometheus no longer sees the VMI expected on a: %v %v", s, err)
	}

	// Prometheus's record of every evaluation since the VMIs were created:
	// the control, Running beside its guest for longer than the `for`
	// (a few evaluations more), was never pending, let alone firing.
	if wait := time.Until(running.Add(forDur + 3*prom.EvalInterval)); wait > 0 {
		time.Sleep(wait)
	}
	window := int(time.Since(testStart).Seconds()) + 2
	s, err := promQuery(fmt.Sprintf(`max_over_time(ALERTS{alertname=%q, vmi_uid=%q}[%ds])`, nowhereAlert, hereUID, window))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) > 0 {
		t.Errorf("%s was %s for %s, whose guest runs on a", nowhereAlert, alertStates(s), here)
	}
	if _, ok := ferryOn("a").metric("ferry_vmi_expected", `vmi_uid="`+hereUID+`"`); !ok {
		t.Errorf("ferryd on a no longer expects %s: the control proved nothing", here)
	}
	t.Logf("%s Running on a beside its guest for %v: %s never pending nor firing", here, time.Since(running).Round(time.Second), nowhereAlert)
}

// nowhereFor is the rule's `for` as the bed's Prometheus evaluates it,
// which must be deploy/alerts.yaml's own.
func nowhereFor(t *testing.T) time.Duration {
	t.Helper()
	groups, err := deploy.Groups()
	if err != nil {
		t.Fatal(err)
	}
	var shipped time.Duration
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert == nowhereAlert {
				d, err := model.ParseDuration(r.For)
				if err != nil {
					t.Fatalf("%s's for %q: %v", nowhereAlert, r.For, err)
				}
				shipped = time.Duration(d)
			}
		}
	}
	if shipped == 0 {
		t.Fatalf("deploy/alerts.yaml has no %s with a `for`", nowhereAlert)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Name     string  `json:"name"`
				Type     string  `json:"type"`
				Duration float64 `json:"duration"`
			} `json:"rules"`
		} `json:"groups"`
	}
	promGet(t, "/api/v1/rules?type=alert", &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Name == nowhereAlert {
				loaded := time.Duration(r.Duration * float64(time.Second))
				if loaded != shipped {
					t.Fatalf("the bed's Prometheus evaluates %s with for %v, deploy/alerts.yaml says %v", nowhereAlert, loaded, shipped)
				}
				return loaded
			}
		}
	}
	t.Fatalf("the bed's Prometheus has not loaded %s", nowhereAlert)
	return 0
}

// promGet decodes the data of one of Prometheus's API answers.
func promGet(t *testing.T, path string, v any) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", prom.Socket)
		}}}
	resp, err := hc.Get("http://prometheus" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		t.Fatalf("Prometheus %s: %d %s (%v)", path, resp.StatusCode, body, err)
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		t.Fatalf("Prometheus %s: %v", path, err)
	}
}

// alertActiveAt is when Prometheus's rule manager first saw the VMI's
// alert pending, from /api/v1/alerts.
func alertActiveAt(t *testing.T, uid string) time.Time {
	t.Helper()
	var data struct {
		Alerts []struct {
			Labels   map[string]string `json:"labels"`
			State    string            `json:"state"`
			ActiveAt time.Time         `json:"activeAt"`
		} `json:"alerts"`
	}
	promGet(t, "/api/v1/alerts", &data)
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == nowhereAlert && a.Labels["vmi_uid"] == uid {
			return a.ActiveAt
		}
	}
	t.Fatalf("/api/v1/alerts holds no %s for VMI %s: %+v", nowhereAlert, uid, data.Alerts)
	return time.Time{}
}

func alertStates(s []testbed.Sample) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.Metric["alertstate"])
	}
	sort.Strings(out)
	return out
}

// pendingVMI creates a VMI on no node yet, as a user creates one (virt-api
// gives it phase Pending), and deletes it when the test ends; it returns
// the UID the API server gave it.
func pendingVMI(t *testing.T, name string) string {
	t.Helper()
	res := kube.Dynamic.Resource(kubevirt.VMIResource).Namespace("default")
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"domain": map[string]any{"devices": map[string]any{}}},
		"status":   map[string]any{"phase": "Pending"},
	}}
	got, err := res.Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating VMI %s: %v", name, err)
	}
	t.Cleanup(func() { res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return string(got.GetUID())
}

// kubeVirtPatch changes a VMI as KubeVirt's own service account does: its
// status and kubevirt.io/ labels are KubeVirt's alone.
func kubeVirtPatch(t *testing.T, kv dynamic.ResourceInterface, name, patch string) {
	t.Helper()
	u, err := kv.Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("KubeVirt's patch of VMI %s: %v", name, err)
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	node, _, _ := unstructured.NestedString(u.Object, "status", "nodeName")
	t.Logf("VMI %s now %s on %q", name, phase, node)
}
