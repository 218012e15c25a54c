package metrics

import (
	"bufio"
	"compress/gzip"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"
)

// Handler serves /metrics. With many migrations in flight nearly every
// series is a job's, and the registry's path (a Metric, label pairs and a
// sort per series) cost 26 ms for 1,000 jobs; so for the text format
// Prometheus asks for, the node-wide series come from the registry and the
// per-job ones are written straight from one tracker snapshot, each job's
// labels escaped once. Other formats take the registry's path for all.
type Handler struct {
	reg  prometheus.Gatherer
	col  *Collector
	log  *zap.Logger
	slow http.Handler
}

// NewHandler serves reg, which holds col.Node() and every other
// registered series, and col's per-job series.
func NewHandler(reg prometheus.Gatherer, col *Collector, log *zap.Logger) *Handler {
	jobs := prometheus.NewRegistry()
	jobs.MustRegister(jobsCollector{col})
	return &Handler{reg: reg, col: col, log: log, slow: RegistryHandler(prometheus.Gatherers{reg, jobs}, log)}
}

// RegistryHandler serves gatherers the registry's way; one bad series must
// not blank the page, since alerts on every other series would go quiet
// with it.
func RegistryHandler(g prometheus.Gatherer, log *zap.Logger) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(log), ErrorHandling: promhttp.ContinueOnError})
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
