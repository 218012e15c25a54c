package daemon

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// scrapeFixture is every phase, a VMI and awkward label values, served
// both ways; bad adds a job whose labels are not UTF-8.
func scrapeFixture(t *testing.T, bad bool) (fast, registry http.Handler) {
	tr := everyPhase(t)
	names := []string{`ns_quote"back\slash`, "ns_new\nline"}
	if bad {
		names = append(names, "ns_bad\xffutf8")
	}
	active := libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, MemoryIteration: 3,
		DataTotal: 1 << 30, MemoryTotal: 1 << 30, DataRemaining: 1 << 28, MemoryRemaining: 1 << 28, MemoryBps: 1 << 26, MemoryDirtyRate: 1 << 20, TimeElapsedMs: 2500}
	for i, name := range names {
		ref := libvirt.Domain{Name: name, UUID: libvirt.UUID{byte(20 + i)}, ID: int32(20 + i)}
		tr.ApplyStats("/run/c/sock", libvirtx.Domain{Ref: ref, Name: name, State: libvirtx.StateRunning, Reason: 1}, active, time.Now())
	}
	col := NewCollector("n1", "test", tr, nil)
	col.vmi = func(j migration.Job) migration.Job {
		j.VMI = &migration.VMIInfo{UID: "uid-" + j.Name, EvacuationNodeName: "n2", EvictionRequested: true,
			MigrationState: &migration.VMIMigrationState{MigrationUID: "m-" + j.Name}}
		return j
	}
	col.pending = func() int { return 2 }
	reg := prometheus.NewRegistry()
	reg.MustRegister(nodeCollector{col})
	old := prometheus.NewRegistry()
	old.MustRegister(col)
	return newScrapeHandler(reg, col, zap.NewNop()), metricsHandler(old, zap.NewNop())
}

func scrape(t *testing.T, h http.Handler, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec
}

// flatten renders families as sorted lines of name, help, type and series.
func flatten(t *testing.T, text []byte) []string {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("unparsable exposition: %v\n%s", err, text)
	}
	var lines []string
	for name, mf := range mfs {
		lines = append(lines, fmt.Sprintf("%s HELP %q TYPE %s", name, mf.GetHelp(), mf.GetType()))
		for _, m := range mf.GetMetric() {
			lines = append(lines, name+seriesString(m))
		}
	}
	sort.Strings(lines)
	return lines
}

func seriesString(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(ls)
	v := m.GetGauge().GetValue()
	if m.Counter != nil {
		v = m.GetCounter().GetValue()
	}
	return "{" + strings.Join(ls, ",") + "} " + fmt.Sprint(v)
}

// The text written from the snapshot is the registry's page, series for
// series: names, help, types, labels and values.
func TestScrapeServesWhatTheRegistryWould(t *testing.T) {
	fast, registry := scrapeFixture(t, false)
	got := scrape(t, fast, nil)
	want := scrape(t, registry, nil)
	if ct := got.Header().Get("Content-Type"); ct != want.Header().Get("Content-Type") {
		t.Errorf("content type %q, the registry's %q", ct, want.Header().Get("Content-Type"))
	}
	g, w := flatten(t, got.Body.Bytes()), flatten(t, want.Body.Bytes())
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Errorf("served:\n%s\n\nregistry:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	body := got.Body.String()
	for _, s := range []string{`domain="ns_quote\"back\\slash"`, `domain="ns_new\nline"`, `ferry_migration_vmi_info{`, `ferry_vmi_marks_pending{node="n1"} 2`} {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %s", s)
		}
	}
	problems, err := promlint.New(bytes.NewReader(got.Body.Bytes())).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
}

func TestScrapeGzipAndOtherFormats(t *testing.T) {
	fast, _ := scrapeFixture(t, false)
	plain := scrape(t, fast, nil).Body.Bytes()
	z := scrape(t, fast, http.Header{"Accept-Encoding": {"gzip, deflate"}})
	if z.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip asked for, Content-Encoding %q", z.Header().Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(z.Body)
	if err != nil {
		t.Fatal(err)
	}
	unz, _ := io.ReadAll(zr)
	if strings.Join(flatten(t, unz), "\n") != strings.Join(flatten(t, plain), "\n") {
		t.Error("gzipped page differs from the plain one")
	}
	// Protocol buffers, as a Prometheus with native histograms asks: the
	// registry's path, with the jobs.
	pb := scrape(t, fast, http.Header{"Accept": {"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"}})
	dec := expfmt.NewDecoder(pb.Body, expfmt.ResponseFormat(pb.Header()))
	info := 0
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			break
		}
		if mf.GetName() == "ferry_migration_info" {
			info = len(mf.GetMetric())
		}
	}
	if info != 5 {
		t.Errorf("protobuf page has %d ferry_migration_info series, want 5 (3 in flight + 2 awkward names)", info)
	}
}

// A job whose labels are not UTF-8 is left out; every other series stays.
func TestScrapeLeavesOutOnlyTheBadJob(t *testing.T) {
	good, _ := scrapeFixture(t, false)
	bad, _ := scrapeFixture(t, true)
	g, b := scrape(t, good, nil).Body.Bytes(), scrape(t, bad, nil).Body.Bytes()
	if strings.Join(flatten(t, g), "\n") != strings.Join(flatten(t, b), "\n") {
		t.Errorf("with a bad job:\n%s\nwithout:\n%s", b, g)
	}
}
