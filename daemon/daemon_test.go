package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/testsock"
)

func startDaemon(t testing.TB) (*Daemon, *http.Client) { return startDaemonWith(t, nil) }

// startDaemonWith starts a daemon whose configuration tweak may change.
func startDaemonWith(t testing.TB, tweak func(*Config)) (*Daemon, *http.Client) {
	t.Helper()
	// Never the API server of a cluster the tests may run in.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	cfg := Config{
		NodeName: "test", DebugSocket: filepath.Join(dir, "ferry.sock"), DebugSocketMode: 0o600,
		LibvirtSockets: []string{filepath.Join(dir, "no-libvirt-here")}, SampleInterval: time.Second,
		ProxyListen: "127.0.0.1:0", ProxySocketDir: filepath.Join(dir, "proxy"),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	d, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	testsock.Run(t, d.Run, d.cfg.DebugSocket)
	return d, testsock.HTTPClient(d.cfg.DebugSocket)
}

func TestDebugAPIRejectsMalformedRequests(t *testing.T) {
	_, hc := startDaemon(t)
	cases := []struct {
		method, path string
		code         int
		says         string
	}{
		{"GET", "/v1/jobs?all=maybe", 400, "not a boolean"},
		{"GET", "/v1/jobs/nosuchdomain", 404, "no migration job for domain"},
		{"GET", "/v2/whatever", 404, "no such endpoint"},
		{"POST", "/v1/jobs", 405, "only GET"},
		{"POST", "/v1/jobs/nosuchdomain/abort", 404, "no migration job in flight"},
		{"POST", "/v1/jobs/nosuchdomain/postcopy", 404, "no migration job in flight"},
		{"POST", "/v1/migrations", 400, "not valid JSON"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, "http://ferryd"+c.path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body api.ErrorResponse
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(body.Error, c.says) {
			t.Errorf("%s %s: %d %q, want %d containing %q", c.method, c.path, resp.StatusCode, body.Error, c.code, c.says)
		}
	}
}

func TestDebugAPIReportsLibvirtDown(t *testing.T) {
	_, hc := startDaemon(t)
	var got api.DomainsResponse
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := hc.Get("http://ferryd/v1/domains")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if len(got.Libvirt) == 1 && got.Libvirt[0].LastError != "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.Node != "test" || len(got.Libvirt) != 1 || got.Libvirt[0].Up || got.Libvirt[0].LastError == "" {
		t.Fatalf("domains response %+v", got)
	}
	// A libvirt that is down must not hide ferryd's metrics from the
	// scraper: ready, and saying which socket is down.
	resp, err := hc.Get("http://ferryd/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "no-libvirt-here") {
		t.Fatalf("readyz %d %q without libvirt", resp.StatusCode, body)
	}
}

func TestMetricsArePromlintClean(t *testing.T) {
	d, _ := startDaemon(t)
	problems, err := testutil.GatherAndLint(d.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	err := (&Config{SampleInterval: time.Millisecond, PostCopyRecoveryTimeout: -time.Second, ProxyFirstStreamWait: time.Millisecond}).Validate()
	for _, want := range []string{"--node-name", "--debug-socket", "--sample-interval", "--postcopy-recovery-timeout", "--proxy-first-stream-wait"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

// A console dir that is, holds or lies in an allowed path would let a
// file chardev truncate a guest's disk.
func TestAConsoleDirOverlappingTheAllowedPathsIsRefused(t *testing.T) {
	for _, c := range [][2]string{{"/var/lib/libvirt/images", "/var/lib/libvirt/images"}, {"/var/lib/libvirt", "/var/lib/libvirt/images/consoles"}, {"/var/lib/libvirt/images", "/var/lib/libvirt"}, {"/", "/run/consoles"}} {
		err := (&Config{MigrationAllowedPaths: []string{c[0]}, MigrationAllowedConsoleDirs: []string{c[1]}}).Validate()
		if err == nil || !strings.Contains(err.Error(), "--migration-allowed-console-dir \""+c[1]+"\" overlaps") {
			t.Errorf("path %s, console dir %s: %v", c[0], c[1], err)
		}
	}
	err := (&Config{MigrationAllowedPaths: []string{"/var/lib/libvirt/images"}, MigrationAllowedConsoleDirs: []string{"/var/log/libvirt/consoles"}}).Validate()
	if err != nil && strings.Contains(err.Error(), "console-dir") {
		t.Errorf("apart: %v", err)
	}
}

// Whoever reaches the debug socket must not send a guest's memory to an
// address of their choosing: a migration names the node whose certificate
// the target must hold, unless ferryd was told to take bare addresses.
func TestAMigrationNamesItsTargetNode(t *testing.T) {
	_, hc := startDaemon(t)
	resp, err := hc.Post("http://ferryd/v1/migrations", "application/json", strings.NewReader(`{"domain":"vm","target":"203.0.113.9:9475"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e api.ErrorResponse
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(e.Error, "targetNode") || !strings.Contains(e.Error, "--migration-allow-any-target") {
		t.Errorf("a migration to a bare address: %d %q, want 400 naming targetNode and --migration-allow-any-target", resp.StatusCode, e.Error)
	}
}

func TestMigrateRequestErrorsNameTheField(t *testing.T) {
	_, hc := startDaemonWith(t, func(c *Config) { c.MigrationAllowAnyTarget = true })
	for body, want := range map[string]string{
		`{"domain":"","target":"10.0.0.1"}`:                                    "domain is empty",
		`{"domain":"vm","target":"nohostport"}`:                                "not the target node's proxy address",
		`{"domain":"vm","target":"10.0.0.2:9475","parallel":-1}`:               "parallel -1",
		`{"domain":"vm","target":"10.0.0.2:9475","bandwith":5}`:                "unknown field",
		`{"domain":"nosuchvm","target":"10.0.0.2:9475","parallel":2}`:          "no running domain",
		`{"domain":"vm","target":"10.0.0.2:9475","targetNode":"Bad_Node"}`:     `targetNode "Bad_Node" is not a node name`,
		`{"domain":"vm","target":"10.0.0.2:9475","targetNode":"b"}`:            "targetNode needs the proxy's TLS",
		`{"domain":"vm","target":"10.0.0.2:9475","deadlineSeconds":2}`:         "below the shortest deadline",
		`{"domain":"vm","target":"10.0.0.2:9475","deadlineSeconds":1e19}`:      "past the longest",
		`{"domain":"vm","target":"10.0.0.2:9475","postCopyAfterSeconds":1e19}`: "postCopyAfterSeconds 1e+19 is outside",
	} {
		resp, err := hc.Post("http://ferryd/v1/migrations", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorResponse
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(e.Error, want) {
			t.Errorf("%s: %d %q, want 400 naming %q", body, resp.StatusCode, e.Error, want)
		}
	}
}

func TestDefaultSocketsFollowTheKubeletPodsDir(t *testing.T) {
	root := t.TempDir()
	pods := filepath.Join(root, "pods")
	c := Config{KubeletPodsDir: pods}
	c.defaultSockets()
	if c.LibvirtGlob != "" || len(c.LibvirtSockets) != 1 || c.LibvirtSockets[0] != DefaultLibvirtSocket {
		t.Errorf("no pods directory: glob %q, sockets %v", c.LibvirtGlob, c.LibvirtSockets)
	}
	if err := os.Mkdir(filepath.Join(root, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	c = Config{KubeletPodsDir: pods}
	c.defaultSockets()
	if c.LibvirtGlob != root+"/pods/*/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock" || len(c.LibvirtSockets) != 0 {
		t.Errorf("with a pods directory: glob %q, sockets %v", c.LibvirtGlob, c.LibvirtSockets)
	}
	c = Config{KubeletPodsDir: pods, LibvirtSockets: []string{"/x"}}
	if why := c.defaultSockets(); c.LibvirtGlob != "" || why != "" {
		t.Errorf("a configured socket got a glob too: %q (%s)", c.LibvirtGlob, why)
	}
}

// A glob that matches nothing for long is said in /readyz's body and in
// ferry_libvirt_socket_glob_matches, without making ferryd unready.
func TestEmptyGlobIsReported(t *testing.T) {
	dir := t.TempDir()
	glob := filepath.Join(dir, "pods", "*", "virtqemud-sock")
	d, err := New(Config{
		NodeName: "test", DebugSocket: filepath.Join(dir, "ferry.sock"), DebugSocketMode: 0o600,
		LibvirtGlob: glob, GlobEmptyAfter: 50 * time.Millisecond, SampleInterval: time.Second,
	}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var body string
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(body, "matched nothing"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never said the glob is empty: %q", body)
		}
		rec := httptest.NewRecorder()
		d.metricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		body = rec.Body.String()
		if rec.Code != http.StatusOK && !strings.HasPrefix(body, "starting") {
			t.Fatalf("/readyz %d %q: an empty glob must not make ferryd unready", rec.Code, body)
		}
	}
	if !strings.Contains(body, glob) {
		t.Errorf("/readyz does not name the glob: %q", body)
	}
	n, err := testutil.GatherAndCount(d.reg, "ferry_libvirt_socket_glob_matches")
	if err != nil || n != 1 {
		t.Errorf("ferry_libvirt_socket_glob_matches: %d series, err %v", n, err)
	}
}

// /readyz on the metrics port, which every pod reaches, says how many
// sockets are down and names none (a launcher's path carries its pod's
// UID); on the debug socket it names a bounded number of them.
func TestReadyzNamesDownSocketsOnlyOnTheDebugSocket(t *testing.T) {
	var socks []string
	d, _ := startDaemonWith(t, func(c *Config) {
		for i := range 3 * readyzSockets {
			socks = append(socks, filepath.Join(filepath.Dir(c.DebugSocket), fmt.Sprintf("down-%d", i)))
		}
		c.LibvirtSockets = socks
	})
	get := func(h http.Handler) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Body.String()
	}
	var body string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if body = get(d.apiHandler()); strings.Contains(body, "more") {
			break
		}
	}
	if n := strings.Count(body, "\n  /"); n != readyzSockets || !strings.Contains(body, fmt.Sprintf("and %d more", 2*readyzSockets)) {
		t.Fatalf("/readyz on the debug socket named %d of %d down sockets: %q", n, 3*readyzSockets, body)
	}
	metrics := get(d.metricsHandler())
	if strings.Contains(metrics, "down-") || !strings.Contains(metrics, fmt.Sprintf("%d of %d libvirt sockets are not connected", 3*readyzSockets, 3*readyzSockets)) {
		t.Fatalf("/readyz on the metrics port: %q; want a count and no socket named", metrics)
	}
}
