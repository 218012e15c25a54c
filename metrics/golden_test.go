package metrics

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
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
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/proxy"
)

const (
	storyPath  = "testdata/story.json"
	goldenPath = "testdata/e2e-output.txt"
)

// notInTheStory are the metrics the story's page lacks, and why: a new
// metric goes into the story or here.
var notInTheStory = map[string]string{
	"ferry_migration_qemu_cpu_usage_ratio":                         "read by the sampler from QEMU's cgroup, not from libvirt: the story's fake libvirt has no QEMU behind it",
	"ferry_migration_qemu_cpu_throttled_seconds":                   "read by the sampler from QEMU's cgroup, not from libvirt: the story's fake libvirt has no QEMU behind it",
	"ferry_proxy_connections":                                      "a relay's connections are counted while it runs; the story records none open",
	"ferry_domain_dirty_rate_bytes_per_second":                     "measured by QEMU's dirty-rate calculation, which the story's fake libvirt does not run; the e2e suite checks it against the guest's own rate",
	"ferry_migration_slots":                                        "the node's scheduler's, which the story's replay of libvirt has none of; daemon's catalogue test sees a real ferryd serve it",
	"ferry_migration_slots_used":                                   "the node's scheduler's, which the story's replay of libvirt has none of; daemon's catalogue test sees a real ferryd serve it",
	"ferry_migration_queued":                                       "the node's scheduler's, which the story's replay of libvirt has none of; daemon's catalogue test sees a real ferryd serve it",
	"ferry_migration_slots_hung":                                   "the node's scheduler's, which the story's replay of libvirt has none of; daemon's catalogue test sees a real ferryd serve it, the hung-libvirtd e2e test sees it count",
	"ferry_node_evacuation_seconds":                                "served once a plan was made, which the story does not make",
	"ferry_libvirt_calls_total":                                    "a count of the whole process's calls, which the tests in one binary share; libvirtx's tests count them, bench-node reads them from a real ferryd",
	"ferry_migration_postcopy_recovery_deadline_timestamp_seconds": "a wall-clock time, which the story's page holds none of; the e2e suite's post-copy recovery past its timeout scrapes it",
}

// storyHandler replays testdata/story.json into a real tracker, its
// libvirt sockets laid out under root, and serves it with ferryd's wiring:
// the collector's node-wide series, the policy's counter and the proxy's
// vectors in one registry, and the Handler.
func storyHandler(t *testing.T) (h http.Handler, root string) {
	t.Helper()
	s := loadStory(t, storyPath)
	reg := prometheus.NewPedanticRegistry()
	times := NewTimes(s.Node, reg)
	// The driver's account, told as ferryd's driver tells it.
	books := drive.NewBooks()
	tr := migration.NewTracker(migration.Config{Node: s.Node, SampleInterval: sampleEvery, OnTimes: times.Observe, Driver: books})
	books.ShowOn(tr.Books())
	col := NewCollector(s.Node, s.Version, tr, fixedSockets(s))
	col.VMIUID = func(_, domain, _ string) string { return s.VMIs[domain].UID }
	col.ExpectedVMIs = func() []api.VMIInfo {
		var out []api.VMIInfo
		for _, v := range s.VMIs {
			if v.Phase == "Running" && v.NodeName == s.Node {
				out = append(out, v)
			}
		}
		return out
	}
	col.VMI = func(j api.Job) api.Job {
		if v, ok := s.VMIs[j.Domain]; ok {
			j.VMI = &v
		}
		return j
	}
	col.MarksPending = func() int { return s.MarksPending }
	col.MarksDelivered = func() map[string]int { return s.MarksDelivered }
	reg.MustRegister(col.Node())
	actions := NewPolicyActions(reg)
	pm := NewProxy(reg)
	p, err := proxy.New(proxy.Config{SocketDir: t.TempDir(), Node: s.Node, Metrics: proxy.Metrics(pm)})
	if err != nil {
		t.Fatal(err)
	}
	root = t.TempDir()
	s.replay(t, tr, books, root, func(sp storyPolicy) { actions.WithLabelValues(s.Node, sp.Action, sp.Mode).Inc() }, p, pm)
	return NewHandler(reg, col, zap.NewNop()), root
}

var goVersion = regexp.MustCompile(`goversion="[^"]*"`)

// normalise takes out of a text page what must vary: the Go version, the
// temporary directory the story's libvirt sockets are laid out under (a
// unix socket cannot be made at the story's own paths), and the order of
// the per-job series (the tracker's jobs are a map's).
func normalise(page []byte, root string) []byte {
	page = goVersion.ReplaceAll(page, []byte(`goversion="GOVERSION"`))
	page = bytes.ReplaceAll(page, []byte(`socket="`+root+"/"), []byte(`socket="/`))
	var out, block []string
	perJob := false
	flush := func() {
		if perJob {
			slices.Sort(block)
		}
		out = append(out, block...)
		block = nil
	}
	for _, l := range strings.SplitAfter(string(page), "\n") {
		if name, ok := strings.CutPrefix(l, "# HELP "); ok {
			flush()
			name, _, _ = strings.Cut(name, " ")
			d, _ := Lookup(name)
			perJob = d.Area == AreaJob
			out = append(out, l)
			continue
		}
		if strings.HasPrefix(l, "#") {
			out = append(out, l)
			continue
		}
		block = append(block, l)
	}
	flush()
	return []byte(strings.Join(out, ""))
}

// updating says whether the golden page is written rather than compared:
// FERRY_UPDATE_DOCS=1, as make generate sets it.
func updating() bool { return os.Getenv("FERRY_UPDATE_DOCS") == "1" }

// TestScrapeOfTheStory serves the recorded story and compares the page
// with testdata/e2e-output.txt: a metric's name, labels, help or values
// that change show there first.
func TestScrapeOfTheStory(t *testing.T) {
	h, root := storyHandler(t)
	page := scrape(t, h, nil).Body.Bytes()
	got := normalise(page, root)
	if updating() {
		if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenPath)
	} else {
		want, err := os.ReadFile(goldenPath)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("/metrics of %s differs from %s:\n%s\nIf the change is meant: FERRY_UPDATE_DOCS=1 go test -run TestScrapeOfTheStory ./metrics/ rewrites it (and review its diff).",
				storyPath, goldenPath, lineDiff(string(want), string(got)))
		}
	}

	problems, err := promlint.New(bytes.NewReader(page)).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}

	fams := parseText(t, page)
	for _, d := range Catalogue() {
		_, served := fams[d.Name]
		why, exempt := notInTheStory[d.Name]
		switch {
		case !served && !exempt:
			t.Errorf("%s is not on the story's page: make the story show it, or say why not in notInTheStory", d.Name)
		case served && exempt:
			t.Errorf("%s is on the story's page, yet notInTheStory says %q", d.Name, why)
		}
	}

	// The registry's path, which a scraper asking for protocol buffers
	// takes, serves the same series.
	pb := scrape(t, h, http.Header{"Accept": {"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"}})
	dec := expfmt.NewDecoder(pb.Body, expfmt.ResponseFormat(pb.Header()))
	slow := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			break
		}
		slow[mf.GetName()] = &mf
	}
	if f, s := canonical(t, fams, root), canonical(t, slow, root); f != s {
		t.Errorf("the text page and the registry's differ:\n%s", lineDiff(s, f))
	}
}

func parseText(t *testing.T, page []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("unparsable page: %v\n%s", err, page)
	}
	return fams
}

// canonical renders families as text with their series and labels
// sorted, Go's version taken out.
func canonical(t *testing.T, fams map[string]*dto.MetricFamily, root string) string {
	t.Helper()
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		mf := fams[n]
		for _, m := range mf.Metric {
			sort.Slice(m.Label, func(i, j int) bool { return m.Label[i].GetName() < m.Label[j].GetName() })
			m.TimestampMs = nil
		}
		sort.Slice(mf.Metric, func(i, j int) bool { return fmt.Sprint(mf.Metric[i].Label) < fmt.Sprint(mf.Metric[j].Label) })
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return string(normalise(b.Bytes(), root))
}

// lineDiff lists the lines only one side has, in order.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	inW, inG := map[string]int{}, map[string]int{}
	for _, l := range w {
		inW[l]++
	}
	for _, l := range g {
		inG[l]++
	}
	var b strings.Builder
	for _, l := range w {
		if inG[l] == 0 {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if inW[l] == 0 {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
