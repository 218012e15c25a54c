package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration/migrationtest"
)

// fakeFerryd serves a debug socket that records what it was asked; it
// stands in for ferryd only to test ferryctl's own parsing and printing.
func fakeFerryd(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "ferry.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestMigrateTakesFlagsBeforeAndAfterTheName(t *testing.T) {
	var got map[string]any
	sock := fakeFerryd(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/migrations" {
			got = nil
			json.NewDecoder(r.Body).Decode(&got)
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"migrationId":"m-1","message":"started"}`)
			return
		}
		http.NotFound(w, r)
	})
	flags := []string{"--to", "10.0.0.2:9475", "--postcopy-after", "5s", "--parallel", "4", "--bandwidth-mibs", "100", "--wait=false"}
	for _, args := range [][]string{
		append([]string{"--socket", sock, "migrate", "vm1"}, flags...),
		append(append([]string{"migrate"}, flags...), "vm1", "--socket", sock),
		append(append([]string{"migrate", "--to", "10.0.0.2:9475", "vm1"}, flags[2:]...), "--socket="+sock),
	} {
		code, _, stderr := ctl(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		want := map[string]any{"domain": "vm1", "target": "10.0.0.2:9475", "postCopyAfterSeconds": 5.0, "parallel": 4.0, "bandwidthMiBs": 100.0}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%v: request %s = %v, want %v (whole request %v)", args, k, got[k], v, got)
			}
		}
	}
}

// Global flags go before or after the command, as with kubectl; the socket
// comes from --socket anywhere or from FERRY_SOCKET.
func TestFlagsBeforeAndAfterTheCommand(t *testing.T) {
	sock, tr, lv := ferryd(t)
	migrating(t, tr, lv, "vm1", 100<<20)
	lists := [][]string{
		{"-o", "json", "jobs"},
		{"jobs", "-o", "json"},
		{"--output=json", "jobs"},
		{"jobs", "--output", "json"},
		{"jobs", "-ojson"},
		{"jobs", "--all", "-o", "json"},
		{"-o", "json", "jobs", "--all"},
		{"--all=false", "jobs", "-o=json"},
	}
	for _, args := range lists {
		for _, where := range []string{"first", "last", "env"} {
			full := args
			switch where {
			case "first":
				full = append([]string{"--socket", sock}, args...)
			case "last":
				full = append(append([]string{}, args...), "--socket", sock)
			case "env":
				t.Setenv("FERRY_SOCKET", sock)
			}
			code, out, stderr := ctl(full...)
			t.Setenv("FERRY_SOCKET", "")
			var jobs []api.Job
			if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 1 || jobs[0].Domain != "vm1" {
				t.Errorf("%v (socket %s): exit %d, output %q, stderr %q", full, where, code, out, stderr)
			}
		}
	}
	for _, args := range [][]string{
		{"job", "vm1", "-o", "yaml"},
		{"-o", "yaml", "job", "vm1"},
		{"job", "-o", "yaml", "vm1"},
		{"job", "--output=yaml", "vm1"},
	} {
		code, out, stderr := ctl(append(args, "--socket", sock)...)
		var j api.Job
		if code != 0 || yaml.Unmarshal([]byte(out), &j) != nil || j.Domain != "vm1" || j.DataRemainingBytes != 100<<20 {
			t.Errorf("%v: exit %d, output %q, stderr %q", args, code, out, stderr)
		}
	}
}

// Every format of every reading command, from the real daemon's answers.
func TestOutputFormats(t *testing.T) {
	sock, tr, lv := ferryd(t)
	migrating(t, tr, lv, "vm1", 100<<20)

	for _, cmd := range [][]string{{"jobs"}, {"job", "vm1"}, {"domains"}} {
		outs := map[string]string{}
		for _, o := range outputs {
			code, out, stderr := ctl(append([]string{"--socket", sock, "-o", o}, cmd...)...)
			if code != 0 {
				t.Fatalf("%v -o %s: exit %d: %s", cmd, o, code, stderr)
			}
			outs[o] = out
		}
		// YAML and JSON are the same document: the JSON field names are
		// the contract.
		var fromJSON, fromYAML any
		if err := json.Unmarshal([]byte(outs["json"]), &fromJSON); err != nil {
			t.Fatalf("%v -o json: %v\n%s", cmd, err, outs["json"])
		}
		if err := yaml.Unmarshal([]byte(outs["yaml"]), &fromYAML); err != nil {
			t.Fatalf("%v -o yaml: %v\n%s", cmd, err, outs["yaml"])
		}
		if !reflect.DeepEqual(fromJSON, fromYAML) {
			t.Errorf("%v: yaml and json differ:\n%s\n%s", cmd, outs["yaml"], outs["json"])
		}
		if strings.HasPrefix(strings.TrimSpace(outs["yaml"]), "{") || strings.HasPrefix(strings.TrimSpace(outs["yaml"]), "[") {
			t.Errorf("%v -o yaml printed JSON:\n%s", cmd, outs["yaml"])
		}
		if !strings.Contains(outs["table"], "vm1") || outs["table"] == outs["json"] {
			t.Errorf("%v -o table:\n%s", cmd, outs["table"])
		}
	}

	_, table, _ := ctl("--socket", sock, "jobs")
	_, wide, _ := ctl("--socket", sock, "jobs", "-o", "wide")
	for _, col := range []string{"SOCKET", "UUID"} {
		if strings.Contains(table, col) || !strings.Contains(wide, col) {
			t.Errorf("column %s: table\n%s\nwide\n%s", col, table, wide)
		}
	}
	if !strings.Contains(wide, lv.Path()) || !strings.Contains(wide, "01020300-0000") {
		t.Errorf("jobs -o wide lacks the job's socket or uuid:\n%s", wide)
	}
	_, wide, _ = ctl("--socket", sock, "domains", "-o", "wide")
	if !strings.Contains(wide, "SOCKET") || !strings.Contains(wide, lv.Path()) {
		t.Errorf("domains -o wide lacks the socket:\n%s", wide)
	}
	_, yml, _ := ctl("--socket", sock, "jobs", "-o", "yaml")
	if !strings.Contains(yml, "dataRemainingBytes: 104857600") {
		t.Errorf("jobs -o yaml lacks the JSON field names:\n%s", yml)
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	code, out, _ := ctl("--help")
	if code != 0 || !strings.Contains(out, "3  ferryd unreachable") || !strings.Contains(out, "ferryctl jobs -o json") {
		t.Errorf("--help: exit %d, does not document exit codes and flag positions:\n%s", code, out)
	}
	cmds := newRoot(&globals{}).Commands()
	if len(cmds) < 10 {
		t.Fatalf("only %d commands", len(cmds))
	}
	for _, c := range cmds {
		for _, args := range [][]string{{c.Name(), "--help"}, {c.Name(), "-h"}, {"help", c.Name()}, {"--socket", "/nonexistent", c.Name(), "--help"}} {
			code, out, stderr := ctl(args...)
			if code != 0 || stderr != "" || !strings.Contains(out, "Usage:") || !strings.Contains(out, "ferryctl "+c.Name()) || !strings.Contains(out, "--output") {
				t.Errorf("%v: exit %d, stderr %q, output:\n%s", args, code, stderr, out)
			}
		}
	}
}

func TestUsageErrorsNameWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-o", "xml", "jobs"}, "table, wide, json, yaml"},
		{[]string{"jobs", "-o", "xml"}, "table, wide, json, yaml"},
		{[]string{"job"}, "exactly one domain"},
		{[]string{"job", "a", "b"}, "exactly one domain"},
		{[]string{"jobs", "extra"}, `jobs takes no arguments, got "extra"`},
		{[]string{"jobs", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"migrate", "vm1"}, "--to HOST:PORT"},
		{[]string{"migrate", "vm1", "--to"}, "flag needs an argument"},
		{[]string{"migrate", "vm1", "--to", "x", "--parallel", "many"}, `invalid argument "many"`},
		{[]string{"watch", "a", "b"}, "at most one domain"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"completion", "fish"}, "bash or zsh"},
		{[]string{}, "a command is needed"},
	} {
		code, _, stderr := ctl(append([]string{"--socket", "/nonexistent"}, c.args...)...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(stderr, c.says) || !strings.Contains(stderr, "--help' for usage") {
			t.Errorf("%v: %q does not say %q", c.args, stderr, c.says)
		}
	}
}

func TestExitCodes(t *testing.T) {
	sock, tr, lv := ferryd(t)
	migrating(t, tr, lv, "vm1", 100<<20)

	if code, out, stderr := ctl("--socket", sock, "jobs"); code != exitOK || !strings.Contains(out, "vm1") {
		t.Errorf("jobs: exit %d, %q %q", code, out, stderr)
	}
	// ferryd answers no: no such job.
	if code, _, stderr := ctl("--socket", sock, "job", "nosuchvm"); code != exitFailed || !strings.Contains(stderr, `no migration job for domain "nosuchvm"`) {
		t.Errorf("job nosuchvm: exit %d, %q", code, stderr)
	}
	if code, _, _ := ctl("--socket", sock, "jobs", "--bogus"); code != exitUsage {
		t.Errorf("jobs --bogus: exit %d", code)
	}

	// watch NAME of a migration that fails: libvirt's job goes away, kept
	// as a failed one.
	code, out := watchTo(t, sock, "vm1", func() {
		lv.SetJob("vm1", nil)
		lv.SetCompletedJob("vm1", libvirtx.JobStats{Type: libvirtx.JobFailed, Operation: libvirtx.OperationMigrationOut, ErrMsg: "connection reset"})
	})
	if code != exitFailed || !strings.Contains(out, "vm1 source: Failed") {
		t.Errorf("watch of a failed migration: exit %d, output %q", code, out)
	}
	// watch NAME of a migration that completes: the transient domain is
	// gone from the source, and only libvirt's lifecycle event says why.
	migrating(t, tr, lv, "vm2", 100<<20)
	code, out = watchTo(t, sock, "vm2", func() {
		lv.RemoveDomain("vm2")
		lv.Lifecycle("vm2", libvirtx.EventStopped, libvirtx.StoppedMigrated)
	})
	if code != exitOK || !strings.Contains(out, "vm2 source: Completed") {
		t.Errorf("watch of a completed migration: exit %d, output %q", code, out)
	}
}

// watchTo runs `ferryctl watch name` until it exits, calling end once the
// job's first line shows the stream is subscribed.
func watchTo(t *testing.T, sock, name string, end func()) (int, string) {
	t.Helper()
	var out syncBuffer
	codec := make(chan int, 1)
	go func() {
		codec <- run(context.Background(), []string{"--socket", sock, "watch", name}, &out, io.Discard)
	}()
	migrationtest.Wait(t, "watch's first line of the job", func() bool { return strings.Contains(out.String(), " source ") })
	end()
	select {
	case code := <-codec:
		return code, out.String()
	case <-time.After(10 * time.Second):
		t.Fatalf("watch %s did not end with the job; output %q", name, out.String())
	}
	return 0, ""
}

func TestUnreachableFerrydSaysWhereAndWhy(t *testing.T) {
	// A socket file left by a ferryd that is gone.
	stale := filepath.Join(t.TempDir(), "ferry.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	for _, c := range []struct {
		socket string
		says   []string
	}{
		{"/nonexistent/ferry.sock", []string{"/nonexistent/ferry.sock does not exist", "not running", "--socket or FERRY_SOCKET"}},
		{stale, []string{"nothing listens on " + stale, "start ferryd"}},
	} {
		for _, cmd := range [][]string{{"jobs"}, {"watch"}, {"abort", "vm1"}} {
			code, _, stderr := ctl(append([]string{"--socket", c.socket}, cmd...)...)
			if code != exitUnreachable {
				t.Errorf("%s %v: exit %d, want 3", c.socket, cmd, code)
			}
			for _, s := range c.says {
				if !strings.Contains(stderr, s) {
					t.Errorf("%s %v: %q does not say %q", c.socket, cmd, stderr, s)
				}
			}
		}
	}
}

// The debug socket is root's, mode 0600: another user is told so.
func TestUnreadableSocketNamesOwnerAndFix(t *testing.T) {
	if syscall.Getuid() != 0 {
		t.Skip("needs root to run ferryctl as another user")
	}
	sock, _, _ := ferryd(t)
	bin := ferryctlBinary(t)
	c := ferryctlCommand(bin, "--socket", sock, "jobs")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUnreachable {
		t.Fatalf("as nobody: %v, output %s", err, out)
	}
	for _, s := range []string{"permission denied", sock, "mode 0600, owner uid 0", "sudo", "--debug-socket-mode"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("%q does not say %q", out, s)
		}
	}
}

// What ferryd says a migration waits for before it starts is printed on
// stderr, out of the answer, which -o json keeps one document.
func TestMigrateSaysWhatItWaitsFor(t *testing.T) {
	sock := fakeFerryd(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/migrations" {
			// As ferryd: only to a client that asked.
			if r.Header.Get(api.QueueHeader) != "" {
				w.Header().Set(api.QueueHeader, "waiting for one of this node's 2 outbound migration slots: 3 ahead")
				w.WriteHeader(http.StatusProcessing)
				w.Header().Del(api.QueueHeader)
			}
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"migrationId":"m-1","message":"started"}`)
			return
		}
		http.NotFound(w, r)
	})
	code, stdout, stderr := ctl("--socket", sock, "-o", "json", "migrate", "vm1", "--to", "10.0.0.2:9475", "--wait=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "vm1: waiting for one of this node's 2 outbound migration slots: 3 ahead") {
		t.Errorf("stderr does not say what the migration waits for: %q", stderr)
	}
	var resp api.MigrateResponse
	if err := json.Unmarshal([]byte(stdout), &resp); err != nil || resp.MigrationID != "m-1" {
		t.Errorf("stdout is not the answer alone: %q (%v)", stdout, err)
	}
}
