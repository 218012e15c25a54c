package client_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
)

// cannedFerryd serves, on a unix socket in a fresh directory, answers
// shaped as ferryd's to the requests the examples make, and prints each
// request as it arrives (its JSON body compacted): the examples' output
// shows what goes over the wire. stop shuts it down and removes the
// directory.
func cannedFerryd() (c *client.Client, stop func()) {
	dir, err := os.MkdirTemp("", "ferryd")
	if err != nil {
		panic(err)
	}
	sock := filepath.Join(dir, "ferry.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: printRequests(cannedRoutes())}
	go srv.Serve(ln)
	return client.New(sock), func() {
		srv.Close()
		os.RemoveAll(dir)
	}
}

func printRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := "ferryd got " + r.Method + " " + r.URL.RequestURI()
		if body, _ := io.ReadAll(r.Body); len(body) > 0 {
			var b bytes.Buffer
			json.Compact(&b, body)
			line += " " + b.String()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		if v := r.Header.Get(api.QueueHeader); v != "" {
			line += " (" + api.QueueHeader + ": " + v + ")"
		}
		fmt.Println(line)
		h.ServeHTTP(w, r)
	})
}

// vm1 is the job the canned ferryd has in flight.
var vm1 = api.Job{ID: "j-1", Domain: "vm1", Role: api.RoleSource, Mode: api.ModePreCopy, Phase: api.PhaseRunning, Iteration: 3, ProgressPercent: 62}

func cannedRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		resp := api.JobsResponse{Node: "node-a", Jobs: []api.Job{vm1}}
		if r.URL.Query().Get("all") == "1" {
			resp.Jobs = append(resp.Jobs, api.Job{ID: "j-0", Domain: "vm0", Role: api.RoleSource, Phase: api.PhaseCompleted, ProgressPercent: 100})
		}
		answer(w, http.StatusOK, resp)
	})
	mux.HandleFunc("GET /v1/jobs/{domain}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("domain") != "vm1" {
			refuse(w, http.StatusNotFound, fmt.Sprintf("no migration job for domain %q on node node-a (in flight or in history)", r.PathValue("domain")))
			return
		}
		answer(w, http.StatusOK, vm1)
	})
	mux.HandleFunc("GET /v1/domains", func(w http.ResponseWriter, r *http.Request) {
		d := api.Domain{Name: "vm1", Socket: "/run/libvirt/virtqemud-sock", State: "running", HoldsGuest: true}
		if r.URL.Query().Get("check") == "1" {
			can := true
			d.Migratable = &can
		}
		answer(w, http.StatusOK, api.DomainsResponse{Node: "node-a", Domains: []api.Domain{d}})
	})
	mux.HandleFunc("GET /v1/domains/{name}/check", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, api.CheckResponse{Node: "node-a", Domain: r.PathValue("name"), Migratable: false, Blockers: []api.Blocker{
			{Code: "hostdev_pci", Severity: api.SeverityBlocks, Message: "a PCI device is passed through", Device: "0000:03:00.0"}}})
	})
	mux.HandleFunc("POST /v1/domains/{name}/check", func(w http.ResponseWriter, r *http.Request) {
		var req api.DryRunRequest
		json.NewDecoder(r.Body).Decode(&req)
		answer(w, http.StatusOK, api.CheckResponse{Node: "node-a", Domain: r.PathValue("name"), Migratable: true, Blockers: []api.Blocker{},
			DryRun: &api.DryRun{Target: req.Target, TargetNode: req.TargetNode, DataPath: "proxy", OK: true, CPU: "identical", DurationMs: 412}})
	})
	plan := api.Plan{Node: "node-a", Targets: []string{"node-b"}, Parallel: 2, Entries: []api.PlanEntry{
		{Order: 1, Domain: "vm1", Target: "node-b", Migratable: true, Mover: api.MoverFerry, Prediction: &api.Prediction{Strategy: api.StrategyPreCopy, Passes: 4, Seconds: 9.5}},
	}, PredictedSeconds: 9.5}
	mux.HandleFunc("GET /v1/plan", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, plan)
	})
	mux.HandleFunc("POST /v1/evacuations", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusAccepted, api.Evacuation{Plan: plan, Running: true})
	})
	mux.HandleFunc("GET /v1/evacuation", func(w http.ResponseWriter, r *http.Request) {
		ended := api.Evacuation{Plan: plan, RealSeconds: 11.2, Moved: 1}
		ended.Entries = []api.PlanEntry{plan.Entries[0]}
		ended.Entries[0].State, ended.Entries[0].RealSeconds = "moved", 11.2
		answer(w, http.StatusOK, ended)
	})
	mux.HandleFunc("GET /v1/watch", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for _, p := range []float64{62, 88} {
			j := vm1
			j.ProgressPercent = p
			enc.Encode(j)
		}
		done := vm1
		done.Phase, done.ProgressPercent = api.PhaseCompleted, 100
		enc.Encode(done)
		w.(http.Flusher).Flush()
		// As ferryd: the stream lasts as long as the client listens.
		<-r.Context().Done()
	})
	mux.HandleFunc("POST /v1/jobs/{domain}/abort", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("force") != "1" {
			refuse(w, http.StatusConflict, "post-copy cannot be cancelled: vm1's migration is in post-copy, so an abort would pause it; to pause it anyway: ferryctl abort vm1 --force")
			return
		}
		j := vm1
		j.Mode, j.AbortStatus = api.ModePostCopy, api.AbortAborting
		answer(w, http.StatusAccepted, api.AbortResult{Job: j, Message: "forced abort in post-copy: the migration is being paused"})
	})
	mux.HandleFunc("POST /v1/jobs/{domain}/postcopy", func(w http.ResponseWriter, r *http.Request) {
		j := vm1
		j.Mode = api.ModePostCopy
		answer(w, http.StatusAccepted, api.AbortResult{Job: j, Message: "switching to post-copy: the target now runs the guest and pulls the remaining pages on demand"})
	})
	mux.HandleFunc("POST /v1/jobs/{domain}/resolve", func(w http.ResponseWriter, r *http.Request) {
		refuse(w, http.StatusConflict, fmt.Sprintf("no migration of %s driven from this node is in doubt (or two sockets serve that name: add ?socket=)", r.PathValue("domain")))
	})
	mux.HandleFunc("POST /v1/jobs/{domain}/recover", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusAccepted, api.MessageResponse{Message: "the recovery of " + r.PathValue("domain") + "'s post-copy tries again now"})
	})
	mux.HandleFunc("POST /v1/jobs/{domain}/give-up", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusAccepted, api.MessageResponse{Message: "the recovery of " + r.PathValue("domain") + "'s post-copy is given up"})
	})
	mux.HandleFunc("POST /v1/migrations", func(w http.ResponseWriter, r *http.Request) {
		var req api.MigrateRequest
		json.NewDecoder(r.Body).Decode(&req)
		if r.Header.Get(api.QueueHeader) != "" {
			w.Header().Set(api.QueueHeader, "waiting for one of this node's 2 outbound migration slots: 1 ahead")
			w.WriteHeader(http.StatusProcessing)
			w.Header().Del(api.QueueHeader)
		}
		answer(w, http.StatusAccepted, api.MigrateResponse{MigrationID: "m-7", Domain: req.Domain, Target: req.Target, TLS: true, TargetNode: req.TargetNode, Message: "migration started"})
	})
	mux.HandleFunc("GET /v1/proxy", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, api.ProxyResponse{Enabled: true, TLS: true, SocketDir: "/run/ferry/proxy", Registered: []api.ProxyMigration{}})
	})
	return mux
}

// answer and refuse write as ferryd's writeJSON and writeError do.
func answer(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func refuse(w http.ResponseWriter, code int, msg string) {
	answer(w, code, api.ErrorResponse{Error: msg})
}
