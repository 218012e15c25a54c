package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/migration"
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

func TestMigrateTakesFlagsAfterTheName(t *testing.T) {
	var got map[string]any
	sock := fakeFerryd(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/migrations" {
			json.NewDecoder(r.Body).Decode(&got)
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"migrationId":"m-1","message":"started"}`)
			return
		}
		http.NotFound(w, r)
	})
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--socket", sock, "migrate", "vm1", "--to", "10.0.0.2:9475",
		"--postcopy-after", "5s", "--parallel", "4", "--bandwidth-mibs", "100", "--wait=false"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := map[string]any{"domain": "vm1", "target": "10.0.0.2:9475", "postCopyAfterSeconds": 5.0, "parallel": 4.0, "bandwidthMiBs": 100.0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("request %s = %v, want %v (whole request %v)", k, got[k], v, got)
		}
	}
}

func TestUsageErrorsNameWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-o", "yaml", "jobs"}, "table or json"},
		{[]string{"job"}, "exactly one domain"},
		{[]string{"migrate", "vm1"}, "--to HOST:PORT"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
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

func TestUnreachableFerrydSaysWhereItLooked(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--socket", "/nonexistent/ferry.sock", "jobs"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(errOut.String(), "cannot reach ferryd at /nonexistent/ferry.sock") {
		t.Fatalf("error %q", errOut.String())
	}
}

func TestProgressLineShowsTheRace(t *testing.T) {
	eta := 12.0
	j := migration.Job{Domain: "ns_vm", Role: migration.RoleSource, Mode: migration.ModePreCopy, Iteration: 3,
		ProgressPercent: 50, DataRemainingBytes: 256 << 20, DirtyRateBytesPerSecond: 64 << 20,
		TransferRateBytesPerSecond: 128 << 20, Convergence: migration.VerdictConverging, EtaSeconds: &eta}
	line := progressLine(j, 10)
	for _, want := range []string{"[#####.....]", "50%", "256.0 MiB", "64.0 MiB/s", "128.0 MiB/s", "iter 3", "Converging", "ETA 12s"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	end := time.Now()
	j.Phase, j.EndTime, j.StartTime, j.FailureReason = migration.PhaseFailed, &end, end.Add(-3*time.Second), "proxy: memory stream broke"
	if s := summaryLine(j); !strings.Contains(s, "Failed after 3s") || !strings.Contains(s, "reason: proxy: memory stream broke") {
		t.Errorf("summary %q", s)
	}
}
