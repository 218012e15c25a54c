package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// postCopyFerryd answers an abort of a post-copy migration as ferryd does:
// 409 with the refusal unless forced, then a job ended by the pause.
func postCopyFerryd(t *testing.T, forced *[]string) string {
	const refusal = "post-copy cannot be cancelled: vm1's migration is in post-copy, so an abort would not cancel it but pause it: the guest stops on both nodes ... To pause it anyway: ferryctl abort vm1 --force"
	return fakeFerryd(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/jobs/vm1/abort":
			*forced = append(*forced, r.URL.Query().Get("force"))
			if r.URL.Query().Get("force") != "1" {
				w.WriteHeader(http.StatusConflict)
				json.NewEncoder(w).Encode(map[string]string{"error": refusal})
				return
			}
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"job":{"domain":"vm1","mode":"PostCopy"},"message":"forced abort in post-copy: the migration is being paused"}`)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/jobs/vm1":
			end := time.Now()
			json.NewEncoder(w).Encode(api.Job{Domain: "vm1", Role: api.RoleSource, Mode: api.ModePostCopy,
				Phase: api.PhasePostCopyFailed, AbortStatus: api.AbortSucceeded, StartTime: end.Add(-time.Second), EndTime: &end})
		default:
			http.NotFound(w, r)
		}
	})
}

func TestAbortInPostCopyNeedsForce(t *testing.T) {
	var forced []string
	sock := postCopyFerryd(t, &forced)

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--socket", sock, "abort", "vm1"}, &out, &errOut); code != 1 {
		t.Fatalf("without --force: exit %d, want 1 (stderr %q)", code, errOut.String())
	}
	for _, want := range []string{"stops on both nodes", "--force"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("without --force: stderr %q does not say %q", errOut.String(), want)
		}
	}

	for _, args := range [][]string{{"abort", "vm1", "--force"}, {"abort", "--force", "vm1"}} {
		out.Reset()
		errOut.Reset()
		if code := run(context.Background(), append([]string{"--socket", sock}, args...), &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d (stderr %q)", args, code, errOut.String())
		}
		if !strings.Contains(out.String(), "being paused") || !strings.Contains(out.String(), "PostCopyFailed") {
			t.Errorf("%v: output %q does not say what was done and how it ended", args, out.String())
		}
	}
	if want := []string{"", "1", "1"}; strings.Join(forced, ",") != strings.Join(want, ",") {
		t.Errorf("force sent as %q, want %q", forced, want)
	}
}

func TestAbortUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"abort"}, "exactly one domain"},
		{[]string{"abort", "vm1", "vm2"}, "exactly one domain"},
		{[]string{"abort", "vm1", "--forse"}, "--force"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append([]string{"--socket", "/nonexistent"}, c.args...), &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(errOut.String(), c.says) {
			t.Errorf("%v: %q does not say %q", c.args, errOut.String(), c.says)
		}
	}
}

// A pod's socket lists a domain named like a VM's: by name alone ferryctl
// is refused, naming both sockets; --libvirt-socket picks one, and the
// abort goes to that socket's libvirt alone.
func TestLibvirtSocketPicksADomainTwoSocketsServe(t *testing.T) {
	host := libvirtxtest.New(t, "")
	pod := libvirtxtest.New(t, podSocket(t))
	sock, tr, _ := ferryd(t, host, pod)
	for _, lv := range []*libvirtxtest.Server{host, pod} {
		migrating(t, tr, lv, "ns_vm", 1<<20)
	}
	code, _, stderr := ctl("--socket", sock, "job", "ns_vm")
	if code != 1 || !strings.Contains(stderr, "ambiguous") || !strings.Contains(stderr, pod.Path()) || !strings.Contains(stderr, host.Path()) || !strings.Contains(stderr, "--libvirt-socket") {
		t.Fatalf("job by name alone: exit %d, stderr %q; want a refusal naming both sockets and the way out", code, stderr)
	}
	for i, lv := range []*libvirtxtest.Server{host, pod} {
		s := lv.Path()
		code, stdout, stderr := ctl("--socket", sock, "--libvirt-socket", s, "job", "ns_vm", "-o", "json")
		var j api.Job
		if code != 0 || json.Unmarshal([]byte(stdout), &j) != nil || j.Socket != s {
			t.Fatalf("job on %s: exit %d, socket %q, stderr %q", s, code, j.Socket, stderr)
		}
		if code, stdout, stderr := ctl("--socket", sock, "--libvirt-socket", s, "abort", "ns_vm"); code != 0 || !strings.Contains(stdout, "Aborted") {
			t.Fatalf("abort on %s: exit %d, stdout %q, stderr %q", s, code, stdout, stderr)
		}
		if h, p := len(host.Calls(libvirtxtest.ProcDomainAbortJob)), len(pod.Calls(libvirtxtest.ProcDomainAbortJob)); h != 1 || p != i {
			t.Fatalf("after the abort on %s: %d aborts on the host's libvirt, %d on the pod's", s, h, p)
		}
	}
}

// podSocket is where a KubeVirt launcher pod's libvirt socket is, under a
// temporary kubelet root.
func podSocket(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "pods", "bbbb", "volumes", "kubernetes.io~empty-dir", "libvirt-runtime", "virtqemud-sock")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// resolve takes no default, and says so; with nothing in doubt ferryd
// refuses and ferryctl exits 1 saying why.
func TestResolveNeedsAKeepAndAMigrationInDoubt(t *testing.T) {
	sock, _, _ := ferryd(t)
	if code, _, stderr := ctl("--socket", sock, "resolve", "vm"); code != 2 || !strings.Contains(stderr, "--keep source or --keep target") {
		t.Fatalf("resolve without --keep: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := ctl("--socket", sock, "resolve", "vm", "--keep", "source"); code != 1 || !strings.Contains(stderr, "in doubt") {
		t.Fatalf("resolve with nothing in doubt: exit %d, stderr %q", code, stderr)
	}
}
