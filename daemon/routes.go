package daemon

import (
	"net/http"
	"strings"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
)

// route is one endpoint of the debug API: how it is called, what it
// answers, and its handler. docs/api.md and the answers to a wrong method
// or path are made from these, so they cannot drift from the router.
type route struct {
	pattern string // method and path, as http.ServeMux takes them
	query   string // the query parameters it reads, "" for none
	body    string // the api type of its JSON body, "" for none
	answer  string // the api type it answers with
	doc     string // what it does, one sentence
	handle  func(d *Daemon) http.Handler
}

// socketQuery is the parameter every request naming a domain takes.
const socketQuery = "`socket=PATH`: the domain on that libvirt socket, when two serve its name"

func debugRoutes() []route {
	return []route{
		{"GET /v1/jobs", "`all=1`: finished jobs too", "", "JobsResponse",
			"The migration jobs in flight on this node.", fn((*Daemon).getJobs)},
		{"GET /v1/jobs/{domain}", socketQuery, "", "Job",
			"The domain's latest job, in flight or ended, with its samples, passes and events.", fn((*Daemon).getJob)},
		{"GET /v1/domains", "`check=1`: whether each could move now", "", "DomainsResponse",
			"The domains libvirt runs here, and each libvirt socket's state.", fn((*Daemon).getDomains)},
		{"GET /v1/domains/{name}/check", socketQuery, "", "CheckResponse",
			"What keeps the domain here, if anything: preflight's blockers and warnings.", fn((*Daemon).check)},
		{"POST /v1/domains/{name}/check", socketQuery, "DryRunRequest", "CheckResponse",
			"The check, and a dry run on a target node that prepares nothing.", fn((*Daemon).check)},
		{"GET /v1/plan", "`to=NODE[,NODE]`, `parallel=N`, `bandwidthMiBs=N`", "", "Plan",
			"How an evacuation of this node would go, guest by guest, predicted.", fn((*Daemon).getPlan)},
		{"POST /v1/evacuations", "", "PlanRequest", "Evacuation",
			"Starts an evacuation of this node; one at a time.", fn((*Daemon).startEvacuation)},
		{"GET /v1/evacuation", "", "", "Evacuation",
			"The last evacuation since ferryd started, running or ended.", fn((*Daemon).getEvacuation)},
		{"GET /v1/watch", "`domain=NAME`, " + socketQuery, "", "Job, one per line (NDJSON)",
			"A stream of job updates as they happen.", fn((*Daemon).watch)},
		{"POST /v1/migrations", "", "MigrateRequest", "MigrateResponse",
			"Starts a migration Ferry drives through its proxy; with the header `" + api.QueueHeader + "` set, a wait for a slot is told first (a 1xx answer).", fn((*Daemon).migrate)},
		{"POST /v1/jobs/{domain}/abort", "`force=1`: abort in post-copy too (pauses the guest on both nodes), " + socketQuery, "", "AbortResult",
			"Aborts the migration; in post-copy only with force (409 otherwise, saying what the pause would do).", fn((*Daemon).abort)},
		{"POST /v1/jobs/{domain}/postcopy", socketQuery, "", "AbortResult",
			"Switches the migration to post-copy.", fn((*Daemon).postCopy)},
		{"POST /v1/jobs/{domain}/resolve", "`keep=source` or `keep=target`, " + socketQuery, "", "MessageResponse",
			"Settles a migration in doubt by keeping one copy (409 for any other).", fn((*Daemon).resolve)},
		{"POST /v1/jobs/{domain}/recover", socketQuery, "", "MessageResponse",
			"Tries to resume a post-copy paused for recovery now.", func(d *Daemon) http.Handler { return d.recovery(drive.NudgeNow) }},
		{"POST /v1/jobs/{domain}/give-up", socketQuery, "", "MessageResponse",
			"Declares a post-copy paused for recovery lost.", func(d *Daemon) http.Handler { return d.recovery(drive.NudgeGiveUp) }},
		{"GET /v1/proxy", "", "", "ProxyResponse",
			"The migration proxy: TLS, its socket directory, the incoming migrations prepared here.", fn((*Daemon).proxyStatus)},
		{"GET /metrics", "", "", "Prometheus text",
			"The metrics, as on the metrics port.", func(d *Daemon) http.Handler { return d.metricsHandler() }},
		{"GET /healthz", "", "", "text",
			"ok while ferryd serves.", fn((*Daemon).healthz)},
		{"GET /readyz", "", "", "text",
			"503 until the libvirt sockets are first scanned, then ok, adding which sockets are down and why.", func(d *Daemon) http.Handler { return d.readyz(true) }},
		{"GET /debug/pprof/heap", "`gc=1`: collect garbage first, `debug=1`: as text, with the runtime's memory figures", "", "pprof heap profile",
			"ferryd's Go heap profile, for hunting a leak (go tool pprof reads it).", fn((*Daemon).heapProfile)},
	}
}

// fn adapts a handler method to a route's.
func fn(h func(*Daemon, http.ResponseWriter, *http.Request)) func(*Daemon) http.Handler {
	return func(d *Daemon) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(d, w, r) })
	}
}

// method and path split a route's pattern.
func (r route) method() string { m, _, _ := strings.Cut(r.pattern, " "); return m }
func (r route) path() string   { _, p, _ := strings.Cut(r.pattern, " "); return p }

// pathsOf lists the paths taking method, for an answer that names them;
// with fixedOnly, only those without a parameter in them.
func pathsOf(routes []route, method string, fixedOnly bool) []string {
	var out []string
	for _, r := range routes {
		if r.method() == method && !(fixedOnly && strings.Contains(r.path(), "{")) {
			out = append(out, r.path())
		}
	}
	return out
}
