package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/peer"
)

func (d *Daemon) apiHandler() http.Handler {
	mux := http.NewServeMux()
	routes := debugRoutes()
	for _, rt := range routes {
		mux.Handle(rt.pattern, rt.handle(d))
	}
	posts, gets := pathsOf(routes, http.MethodPost, false), pathsOf(routes, http.MethodGet, true)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s: only GET, and POST on %s", r.Method, r.URL.Path, strings.Join(posts, ", ")))
			return
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s %s; try GET %s (docs/api.md lists every route)", r.Method, r.URL.Path, strings.Join(gets, ", ")))
	})
	return d.logRequests(mux)
}

func (d *Daemon) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.scrape)
	mux.HandleFunc("GET /healthz", d.healthz)
	mux.HandleFunc("GET /readyz", d.readyz(false))
	return mux
}

// readyzSockets and readyzAtOnce bound what /readyz costs (see readyz).
const (
	readyzSockets = 16
	readyzAtOnce  = 4
)

func (d *Daemon) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Write([]byte("ok\n"))
}

// readyz is ready once ferryd is serving and has looked for its libvirt
// sockets. A libvirt that is down does not make ferryd unready: its metrics
// (ferry_libvirt_up = 0) must still be scraped for the alert to fire; the
// body says how many sockets are down, and on the debug socket (named)
// which.
//
// The metrics port, which every pod may reach, names none: a launcher's
// socket path carries its pod's UID, and its error is the pod's libvirt's
// text. Even named, at most readyzSockets are, and readyzAtOnce bodies
// are built at once.
func (d *Daemon) readyz(named bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if !d.Pool.Started() {
			http.Error(w, "starting: libvirt sockets not scanned yet", http.StatusServiceUnavailable)
			return
		}
		select {
		case d.readyzSlots <- struct{}{}:
			defer func() { <-d.readyzSlots }()
		default:
			// Ready all the same: whoever floods the port must not make
			// the kubelet's probe fail.
			w.Write([]byte("ok (details withheld: too many readiness checks at once)\n"))
			return
		}
		var b strings.Builder
		if !d.Pool.Ready() {
			d.writeDownSockets(&b, named)
		}
		// A node without VMs matches nothing too, so this is said, not failed.
		if g, ok := d.Pool.GlobStatus(); ok && g.Empty {
			fmt.Fprintf(&b, "the libvirt socket glob %s has matched nothing for %s: no VMs here, or a wrong --kubelet-pods-dir or mount\n",
				g.Glob, time.Since(g.Since).Round(time.Second))
		}
		if b.Len() == 0 {
			w.Write([]byte("ok\n"))
			return
		}
		w.Write([]byte("ok, but " + b.String()))
	}
}

// writeDownSockets says how many libvirt sockets are not connected, and
// when named, which (at most readyzSockets) and why.
func (d *Daemon) writeDownSockets(b *strings.Builder, named bool) {
	all := d.Pool.Status()
	down := 0
	for _, s := range all {
		if s.Up {
			continue
		}
		if down++; named && down <= readyzSockets {
			if down == 1 {
				b.WriteString("not every libvirt socket is connected:\n")
			}
			fmt.Fprintf(b, "  %s: %s\n", s.Socket, s.LastError)
		}
	}
	switch {
	case down == 0:
	case !named:
		fmt.Fprintf(b, "%d of %d libvirt sockets are not connected (ferryctl domains, on the node, names them)\n", down, len(all))
	case down > readyzSockets:
		fmt.Fprintf(b, "  and %d more (ferryctl domains lists them all)\n", down-readyzSockets)
	}
}

func (d *Daemon) getJobs(w http.ResponseWriter, r *http.Request) {
	all, err := boolParam(r, "all")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	jobs := d.Tracker.Jobs(all)
	for i := range jobs {
		jobs[i] = d.forAPI(jobs[i])
	}
	writeJSON(w, http.StatusOK, api.JobsResponse{Node: d.cfg.NodeName, Jobs: jobs})
}

func (d *Daemon) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := d.Tracker.JobByName(socketParam(r), r.PathValue("domain"))
	switch {
	case errors.Is(err, migration.ErrAmbiguous):
		writeError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, d.forAPI(j))
}

func (d *Daemon) getDomains(w http.ResponseWriter, r *http.Request) {
	doms := d.Tracker.Domains()
	if doms == nil {
		doms = []api.Domain{}
	}
	if d.meter != nil {
		d.meter.Annotate(doms)
	}
	if r.URL.Query().Get("check") == "1" {
		d.checks.Annotate(r.Context(), doms)
	}
	writeJSON(w, http.StatusOK, api.DomainsResponse{Node: d.cfg.NodeName, Domains: doms, Libvirt: socketsForAPI(d.Pool.Status())})
}

// watch streams job updates as NDJSON, one Job per line, optionally for one
// domain (?domain=NAME) or socket (?socket=PATH).
func (d *Daemon) watch(w http.ResponseWriter, r *http.Request) {
	domain, socket := r.URL.Query().Get("domain"), socketParam(r)
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	enc := json.NewEncoder(w)
	updates := d.Tracker.Watch(r.Context())
	for j := range updates {
		if domain != "" && j.Domain != domain || socket != "" && j.Socket != socket {
			continue
		}
		if err := enc.Encode(d.forAPI(j)); err != nil {
			return
		}
		fl.Flush()
	}
}

func (d *Daemon) abort(w http.ResponseWriter, r *http.Request) {
	abortHandler(func(ctx context.Context, socket, domain string, force bool) (api.AbortResult, error) {
		return d.act.Abort(ctx, migration.JobRef{Socket: socket, Domain: domain}, force, migration.AbortByOperator, "")
	}, d.log)(w, r)
}

// abortFunc is the Actuator's Abort, or a stand-in where no libvirt can put a job
// in post-copy.
type abortFunc func(ctx context.Context, socket, domain string, force bool) (api.AbortResult, error)

// abortHandler serves POST /v1/jobs/{domain}/abort[?force=1]. Force is a
// query parameter rather than a body so the bodiless request that aborts a
// pre-copy migration stays as it was.
func abortHandler(abort abortFunc, log *zap.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		force, err := boolParam(r, "force")
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		// Not the request's own context: an abort recorded and on its way
		// to libvirt is carried through even if the client goes away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
		defer cancel()
		res, err := abort(ctx, socketParam(r), r.PathValue("domain"), force)
		switch {
		case err == nil:
			log.Info("abort requested", zap.String("domain", res.Job.Domain), zap.String("mode", string(res.Job.Mode)), zap.Bool("force", force))
			writeJSON(w, http.StatusAccepted, res)
		case errors.Is(err, migration.ErrNoJob):
			writeError(w, http.StatusNotFound, err.Error())
		case errors.Is(err, migration.ErrNoLibvirt):
			writeError(w, http.StatusServiceUnavailable, err.Error())
		case errors.Is(err, migration.ErrNotSource), errors.Is(err, migration.ErrPostCopyNeedsForce), errors.Is(err, migration.ErrAmbiguous),
			errors.Is(err, drive.ErrAborting):
			writeError(w, http.StatusConflict, err.Error())
		default:
			writeError(w, http.StatusBadGateway, err.Error())
		}
	}
}

// resolve ends a migration in doubt by an operator's word: keep=source
// resumes this node's copy (the operator has made sure the target's is
// gone), keep=target ends it (the guest runs there).
func (d *Daemon) resolve(w http.ResponseWriter, r *http.Request) {
	outcome := map[string]string{"source": peer.OutcomeStopped, "target": peer.OutcomeRunning}[r.URL.Query().Get("keep")]
	if outcome == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("keep=%q: say which copy to keep, keep=source or keep=target", r.URL.Query().Get("keep")))
		return
	}
	domain := r.PathValue("domain")
	if d.source == nil || !d.source.Resolve(socketParam(r), domain, outcome) {
		writeError(w, http.StatusConflict, fmt.Sprintf("no migration of %s driven from this node is in doubt (or two sockets serve that name: add ?socket=)", domain))
		return
	}
	d.log.Warn("an operator settled a migration in doubt", zap.String("domain", domain), zap.String("keep", r.URL.Query().Get("keep")))
	writeJSON(w, http.StatusAccepted, api.MessageResponse{Message: "the migration of " + domain + " is settled keeping the " + r.URL.Query().Get("keep") + "'s copy"})
}

// recovery passes an operator's word to the recovery of a paused
// post-copy: try now (or again, one given up), or give up (the guest is
// then declared lost). A target has only giving up: its source resumes.
func (d *Daemon) recovery(word string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		domain, socket := r.PathValue("domain"), socketParam(r)
		if err := d.Tracker.Unambiguous(socket, domain); err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
		var msg string
		switch {
		case d.source != nil && d.source.Recovery(socket, domain, word):
			msg = "the recovery of " + domain + "'s post-copy tries again now"
			if word == drive.NudgeGiveUp {
				msg = "the recovery of " + domain + "'s post-copy is given up once the attempt under way (if any) ends: the guest is then declared lost, its memory split between the two nodes (ferryctl recover starts it again while the guest is held here)"
			}
		case word == drive.NudgeGiveUp && d.Tracker.Books().IncomingGiveUp(socket, domain):
			msg = "the paused incoming post-copy of " + domain + " is declared lost on this node; its source goes on resuming it unless given up there too"
		default:
			writeError(w, http.StatusConflict, fmt.Sprintf("no post-copy of %s is paused for recovery here, nor a recovery given up whose guest is still held here (recover: run it on the source node; or two sockets serve that name: add ?socket=)", domain))
			return
		}
		d.log.Warn("an operator spoke to a post-copy recovery", zap.String("domain", domain), zap.String("word", word))
		writeJSON(w, http.StatusAccepted, api.MessageResponse{Message: msg})
	}
}

// maxQueueNotices bounds the informational answers one migration request
// gets while it waits for slots.
const maxQueueNotices = 3

// queueNotices tells the client, before the final answer, what its
// migration waits for: a 102 Processing with the sentence in QueueHeader.
// It is written from the migration's own start, in the slot queue: a
// client that stops reading may not hold it, so the write gives up soon.
func queueNotices(w http.ResponseWriter) func(string) {
	told := 0
	rc := http.NewResponseController(w)
	return func(msg string) {
		if told++; told <= maxQueueNotices {
			rc.SetWriteDeadline(time.Now().Add(time.Second))
			w.Header().Set(api.QueueHeader, msg)
			w.WriteHeader(http.StatusProcessing)
			w.Header().Del(api.QueueHeader)
			rc.SetWriteDeadline(time.Time{})
		}
	}
}

func (d *Daemon) migrate(w http.ResponseWriter, r *http.Request) {
	if d.source == nil {
		writeError(w, http.StatusConflict, "this ferryd runs without a migration proxy (--proxy-listen is empty)")
		return
	}
	var req api.MigrateRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "migration request is not valid JSON: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if r.Header.Get(api.QueueHeader) != "" && r.ProtoAtLeast(1, 1) {
		// Only a client that asked hears of the queue: others would take
		// the informational answer for the final one.
		ctx = drive.WithQueueNotice(ctx, queueNotices(w))
	}
	resp, err := d.source.Start(ctx, req)
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, resp)
	case errors.Is(err, drive.ErrBadRequest):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, drive.ErrConflict):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusBadGateway, err.Error())
	}
}

func (d *Daemon) postCopy(w http.ResponseWriter, r *http.Request) {
	j, err := d.act.StartPostCopy(r.Context(), migration.JobRef{Socket: socketParam(r), Domain: r.PathValue("domain")}, "by an operator through Ferry")
	switch {
	case errors.Is(err, drive.ErrSwitchWaiting):
		writeJSON(w, http.StatusAccepted, api.AbortResult{Job: j, Message: "the switch to post-copy is asked, and is made as soon as QEMU's migration is active"})
	case err == nil:
		writeJSON(w, http.StatusAccepted, api.AbortResult{Job: j, Message: "switching to post-copy: the target now runs the guest and pulls the remaining pages on demand"})
	case errors.Is(err, migration.ErrNoJob):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, migration.ErrNoLibvirt):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, migration.ErrNotSource), errors.Is(err, migration.ErrAlreadyPostCopy), errors.Is(err, migration.ErrAmbiguous),
		errors.Is(err, drive.ErrAborting), errors.Is(err, drive.ErrNoPostCopy):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusBadGateway, err.Error())
	}
}

func (d *Daemon) proxyStatus(w http.ResponseWriter, _ *http.Request) {
	resp := api.ProxyResponse{Registered: []api.ProxyMigration{}}
	if d.Proxy != nil {
		resp.Enabled, resp.TLS, resp.SocketDir = true, d.Proxy.TLS(), d.Proxy.SocketDir()
		if reg := d.Proxy.Registered(); reg != nil {
			resp.Registered = redactRegistered(reg)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// socketParam is the libvirt socket a request names with ?socket=, as
// ferryd names it (its path, cleaned), or "" for none.
func socketParam(r *http.Request) string {
	if s := r.URL.Query().Get("socket"); s != "" {
		return filepath.Clean(s)
	}
	return ""
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query parameter %s=%q is not a boolean (use 1/0 or true/false)", name, v)
	}
	return b, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, api.ErrorResponse{Error: msg})
}

func (d *Daemon) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		d.log.Debug("debug request", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Duration("took", time.Since(start)))
	})
}
