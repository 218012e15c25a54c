package daemon

import (
	"bufio"
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/migration"
)

// scrapeHandler serves /metrics. With many migrations in flight nearly
// every series is a job's, and the registry's path (a Metric, label pairs
// and a sort per series) cost 26 ms for 1,000 jobs; so for the text format
// Prometheus asks for, the node-wide series come from the registry and the
// per-job ones are written straight from one tracker snapshot, each job's
// labels escaped once. Other formats take the registry's path for all.
type scrapeHandler struct {
	reg  *prometheus.Registry
	col  *Collector
	log  *zap.Logger
	slow http.Handler
}

func newScrapeHandler(reg *prometheus.Registry, col *Collector, log *zap.Logger) *scrapeHandler {
	jobs := prometheus.NewRegistry()
	jobs.MustRegister(jobsCollector{col})
	return &scrapeHandler{reg: reg, col: col, log: log, slow: metricsHandler(prometheus.Gatherers{reg, jobs}, log)}
}

// metricsHandler serves gatherers; one bad series must not blank the page,
// since alerts on every other series would go quiet with it.
func metricsHandler(g prometheus.Gatherer, log *zap.Logger) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(log), ErrorHandling: promhttp.ContinueOnError})
}

func (h *scrapeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	format := expfmt.Negotiate(r.Header)
	if format.FormatType() != expfmt.TypeTextPlain {
		h.slow.ServeHTTP(w, r)
		return
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		h.log.Error("metrics: series left out of the scrape", zap.Error(err))
	}
	w.Header().Set("Content-Type", string(format))
	var out io.Writer = w
	if gzipAccepted(r) {
		w.Header().Set("Content-Encoding", "gzip")
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer gz.Close()
		out = gz
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	defer bw.Flush()
	enc := expfmt.NewEncoder(bw, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			h.log.Debug("metrics: scrape cut short", zap.Error(err))
			return
		}
	}
	h.col.writeJobs(bw, h.col.tracker.Snapshot().Jobs, h.log)
}

func gzipAccepted(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" {
			return true
		}
	}
	return false
}

// writeJobs writes the per-job families in the text format, each family's
// series together as the format requires.
func (c *Collector) writeJobs(w *bufio.Writer, jobs []migration.Job, log *zap.Logger) {
	bufs := make([][]byte, len(jobFamilies))
	var labels []byte
	for _, j := range jobs {
		vals := [...]string{c.node, j.Socket, j.Domain, string(j.Role), j.Namespace, j.Name}
		if !allUTF8(vals[:]) {
			// The registry drops such a series too; the rest are served.
			log.Warn("metrics: job left out: a label is not valid UTF-8", zap.String("domain", j.Domain), zap.String("socket", j.Socket))
			continue
		}
		labels = labels[:0]
		for i, v := range vals {
			labels = appendLabel(labels, i, jobLabels[i], v)
		}
		c.jobSeries(j, func(f *family, v float64, extra ...string) {
			if !allUTF8(extra) {
				log.Warn("metrics: series left out: a label is not valid UTF-8", zap.String("metric", f.name), zap.String("domain", j.Domain))
				return
			}
			b := append(bufs[f.index], f.name...)
			b = append(b, labels...)
			for i, e := range extra {
				b = appendLabel(b, 1, f.extraLabels[i], e)
			}
			b = append(b, "} "...)
			b = appendValue(b, v)
			bufs[f.index] = append(b, '\n')
		})
	}
	for i, f := range jobFamilies {
		if len(bufs[i]) == 0 {
			continue
		}
		w.WriteString("# HELP " + f.name + " " + escapeHelp(f.help) + "\n# TYPE " + f.name + " gauge\n")
		w.Write(bufs[i])
	}
}

func allUTF8(vs []string) bool {
	for _, v := range vs {
		if !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

// appendLabel appends name="value", opening the braces for the first.
func appendLabel(b []byte, i int, name, value string) []byte {
	if i == 0 {
		b = append(b, '{')
	} else {
		b = append(b, ',')
	}
	b = append(b, name...)
	b = append(b, '=', '"')
	for k := 0; k < len(value); k++ {
		switch ch := value[k]; ch {
		case '\\':
			b = append(b, '\\', '\\')
		case '"':
			b = append(b, '\\', '"')
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, ch)
		}
	}
	return append(b, '"')
}

// appendValue writes a sample value as the text format spells it.
func appendValue(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
