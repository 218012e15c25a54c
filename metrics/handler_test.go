package metrics

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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration/migrationtest"
)

// scrapeFixture is every phase, a VMI and awkward label values, served
// both ways; addBad adds a job whose labels are not UTF-8.
func scrapeFixture(t *testing.T) (fast, registry http.Handler, addBad func()) {
	tr, _ := everyPhase(t)
	active := libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, MemoryIteration: 3,
		DataTotal: 1 << 30, MemoryTotal: 1 << 30, DataRemaining: 1 << 28, MemoryRemaining: 1 << 28, MemoryBps: 1 << 26, MemoryDirtyRate: 1 << 20, TimeElapsedMs: 2500}
	f := libvirtxtest.New(t, "")
	migrationtest.Serve(t, tr, f)
	id := int32(20)
	add := func(names ...string) {
		for _, name := range names {
			id++
			f.SetDomain(runningDomain(name, id))
			f.SetJob(name, active)
		}
		for _, name := range names {
			migrationtest.WaitJob(t, tr, f.Path(), name, "running", func(j api.Job) bool { return j.ElapsedMs == active.TimeElapsedMs })
		}
	}
	add(`ns_quote"back\slash`, "ns_new\nline")
	col := NewCollector("n1", "test", tr, nil)
	col.VMI = func(j api.Job) api.Job {
		j.VMI = &api.VMIInfo{UID: "uid-" + j.Name, EvacuationNodeName: "n2", EvictionRequested: true,
			MigrationState: &api.VMIMigrationState{MigrationUID: "m-" + j.Name}}
		return j
	}
	col.MarksPending = func() int { return 2 }
	reg := prometheus.NewRegistry()
	reg.MustRegister(col.Node())
	old := prometheus.NewRegistry()
	old.MustRegister(col)
	return NewHandler(reg, col, zap.NewNop()), RegistryHandler(old, zap.NewNop()), func() { add("ns_bad\xffutf8") }
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
	fast, registry, _ := scrapeFixture(t)
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
	fast, _, _ := scrapeFixture(t)
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
	h, _, addBad := scrapeFixture(t)
	g := scrape(t, h, nil).Body.Bytes()
	addBad()
	b := scrape(t, h, nil).Body.Bytes()
	if strings.Join(flatten(t, g), "\n") != strings.Join(flatten(t, b), "\n") {
		t.Errorf("with a bad job:\n%s\nwithout:\n%s", b, g)
	}
}
