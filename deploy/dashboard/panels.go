package dashboard

// Query is one query of a panel.
type Query struct {
	Expr   string
	Legend string
	// InFlight: the query has data whenever a migration is in flight; the
	// end-to-end test fails if it returns nothing then.
	InFlight bool
}

// Panel is one panel of the dashboard; docs/operations.md describes each by Title.
type Panel struct {
	Title       string
	Description string
	Kind        string // timeseries, stat, table, bargauge
	Unit        string
	Queries     []Query
	// Instant queries (tables, outcome counts over the dashboard's range).
	Instant bool
}

// Row is a titled group of panels.
type Row struct {
	Title  string
	Panels []Panel
}

const sel = `node=~"$node"`

// Rows is the dashboard's content, top to bottom.
var Rows = []Row{
	{Title: "Migrations in flight", Panels: []Panel{
		{
			Title:       "Migrations in flight",
			Description: "Jobs ferryd tracks right now, by node and role (source or target).",
			Kind:        "stat",
			Queries:     []Query{{Expr: `count by (node, role) (ferry_migration_info{` + sel + `})`, Legend: "{{node}} {{role}}", InFlight: true}},
		},
		{
			Title:       "Progress",
			Description: "Share of the data sent so far, per migrating domain (source side; capped at 99 % until libvirt reports completion).",
			Kind:        "timeseries", Unit: "percentunit",
			Queries: []Query{{Expr: `ferry_migration_progress_ratio{` + sel + `}`, Legend: "{{node}} {{domain}}", InFlight: true}},
		},
		{
			Title:       "Dirty rate vs transfer rate",
			Description: "The race pre-copy must win: memory the guest dirties per second against memory sent per second. A dirty rate at or above the transfer rate does not converge.",
			Kind:        "timeseries", Unit: "Bps",
			Queries: []Query{
				{Expr: `ferry_migration_dirty_rate_bytes_per_second{` + sel + `}`, Legend: "dirtied {{domain}}", InFlight: true},
				{Expr: `ferry_migration_transfer_rate_bytes_per_second{` + sel + `}`, Legend: "sent {{domain}}", InFlight: true},
			},
		},
		{
			Title:       "Memory remaining",
			Description: "Guest memory still to send in the current pass.",
			Kind:        "timeseries", Unit: "bytes",
			Queries: []Query{{Expr: `ferry_migration_memory_remaining_bytes{` + sel + `}`, Legend: "{{node}} {{domain}}", InFlight: true}},
		},
		{
			Title:       "Iterations",
			Description: "The pre-copy pass over guest memory each migration is in; many passes with little progress mean the guest outruns the link.",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{{Expr: `ferry_migration_iteration{` + sel + `}`, Legend: "{{node}} {{domain}}", InFlight: true}},
		},
		{
			Title:       "State and convergence verdict",
			Description: "Each job's role, mode (pre-copy or post-copy), phase and Ferry's convergence verdict (Unknown, Converging, Stalled, Diverging).",
			Kind:        "table", Instant: true,
			Queries: []Query{{Expr: `max by (node, domain, namespace, name, role, mode, phase, convergence) (ferry_migration_info{` + sel + `})`, InFlight: true}},
		},
		{
			Title:       "Expected downtime and ETA",
			Description: "Downtime libvirt expects for the final stop-and-copy, and the estimated time to completion (absent while a migration is not converging).",
			Kind:        "timeseries", Unit: "s",
			Queries: []Query{
				{Expr: `ferry_migration_expected_downtime_seconds{` + sel + `}`, Legend: "downtime {{domain}}", InFlight: true},
				{Expr: `ferry_migration_eta_seconds{` + sel + `}`, Legend: "ETA {{domain}}"},
			},
		},
		{
			Title:       "QEMU CPU",
			Description: "CPU the migrating QEMU uses, in cores, from its cgroup; a CPU-starved source rarely converges.",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{{Expr: `ferry_migration_qemu_cpu_usage_ratio{` + sel + `}`, Legend: "{{node}} {{role}} {{domain}}"}},
		},
	}},
	{Title: "Outcomes", Panels: []Panel{
		{
			Title:       "Outcomes by result",
			Description: "Migration jobs that ended in the dashboard's time range, by role and result (completed, failed, aborted, postcopy_failed, lost).",
			Kind:        "bargauge", Instant: true,
			Queries: []Query{{Expr: `sum by (role, result) (increase(ferry_migrations_total{` + sel + `}[$__range]))`, Legend: "{{role}} {{result}}"}},
		},
		{
			Title:       "Failures by plane and class",
			Description: "Failed, aborted and post-copy-failed jobs in the dashboard's time range by failure plane (Control, Data, Guest, Operator) and class (e.g. LinkDown, NotConverging, AuthFailed); the job's failureEvidence says what decided it.",
			Kind:        "bargauge", Instant: true,
			Queries: []Query{{Expr: `sum by (plane, class) (increase(ferry_migrations_total{class!="", ` + sel + `}[$__range]))`, Legend: "{{plane}} {{class}}"}},
		},
		{
			Title:       "Convergence policy decisions",
			Description: "Decisions of the convergence policy over time, by action (raise-downtime, switch-over, post-copy, abort) and mode (act: carried out; advise: shown only).",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{{Expr: `sum by (node, action, mode) (increase(ferry_migration_policy_actions_total{` + sel + `}[$__rate_interval]))`, Legend: "{{node}} {{mode}} {{action}}"}},
		},
		{
			Title:       "Downtime and duration",
			Description: "Median and 95th percentile, over the dashboard's time range, of how long ended migrations stopped the guest and how long they took, by role, from libvirt's completed-job statistics (jobs libvirt kept none of are left out).",
			Kind:        "bargauge", Unit: "s", Instant: true,
			Queries: []Query{
				{Expr: `histogram_quantile(0.5, sum by (le, role) (increase(ferry_migration_downtime_seconds_bucket{` + sel + `}[$__range])))`, Legend: "downtime p50 {{role}}"},
				{Expr: `histogram_quantile(0.95, sum by (le, role) (increase(ferry_migration_downtime_seconds_bucket{` + sel + `}[$__range])))`, Legend: "downtime p95 {{role}}"},
				{Expr: `histogram_quantile(0.5, sum by (le, role) (increase(ferry_migration_duration_seconds_bucket{` + sel + `}[$__range])))`, Legend: "duration p50 {{role}}"},
				{Expr: `histogram_quantile(0.95, sum by (le, role) (increase(ferry_migration_duration_seconds_bucket{` + sel + `}[$__range])))`, Legend: "duration p95 {{role}}"},
			},
		},
		{
			Title:       "Post-copy failures",
			Description: "Domains whose post-copy migration failed (1 while the domain is in that state; each such VMI must be restarted from its disks), and post-copy failures counted over time.",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{
				{Expr: `max by (node, namespace, name, domain) (ferry_domain_attention{reason="postcopy_failed", ` + sel + `})`, Legend: "{{node}} {{domain}}"},
				{Expr: `sum by (node, role) (increase(ferry_migrations_total{result="postcopy_failed", ` + sel + `}[$__rate_interval]))`, Legend: "ended {{node}} {{role}}"},
			},
		},
	}},
	{Title: "Node", Panels: []Panel{
		{
			Title:       "Migration proxy throughput",
			Description: "Bytes per second the migration proxy relays, by stream (control, memory, disk) and direction (to_target, from_target).",
			Kind:        "timeseries", Unit: "Bps",
			Queries: []Query{{Expr: `sum by (node, stream, direction) (rate(ferry_proxy_bytes_total{` + sel + `}[$__rate_interval]))`, Legend: "{{node}} {{stream}} {{direction}}", InFlight: true}},
		},
		{
			Title:       "Migration proxy connections",
			Description: "Relayed connections open, by stream and this node's side of the migration.",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{{Expr: `sum by (node, stream, side) (ferry_proxy_connections{` + sel + `})`, Legend: "{{node}} {{stream}} {{side}}", InFlight: true}},
		},
		{
			Title:       "Migration proxy refusals",
			Description: "Connections and migrations the proxy refused, by reason (shutting_down is a ferryd being stopped and expected); any other reason also raises FerryProxyRejectingConnections.",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{{Expr: `sum by (node, reason) (increase(ferry_proxy_rejected_total{` + sel + `}[$__rate_interval])) > 0`, Legend: "{{node}} {{reason}}"}},
		},
		{
			Title:       "Guests held",
			Description: "Domains holding their guest on each node (running, or paused so that a resume runs it; never a migration's waiting side), and guests held on more than one node, which raise FerryGuestRunningOnTwoNodes.",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{
				{Expr: `count by (node) (ferry_domain_active{` + sel + `})`, Legend: "{{node}}", InFlight: true},
				{Expr: `count by (uuid) (max by (uuid, node, socket) (ferry_domain_active)) > 1`, Legend: "twice: {{uuid}}"},
			},
		},
		{
			Title:       "libvirt up",
			Description: "Whether ferryd is connected to each libvirt socket it watches (1 up, 0 down); down for 5 minutes raises FerryLibvirtUnreachable.",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{{Expr: `ferry_libvirt_up{` + sel + `}`, Legend: "{{node}} {{socket}}", InFlight: true}},
		},
		{
			Title:       "VMI marks pending",
			Description: "Post-copy failure marks and Events ferryd has not yet delivered to the API server (KubeVirt reporting on), and marks done by outcome.",
			Kind:        "timeseries", Unit: "none",
			Queries: []Query{
				{Expr: `ferry_vmi_marks_pending{` + sel + `}`, Legend: "pending {{node}}"},
				{Expr: `sum by (node, outcome) (increase(ferry_vmi_marks_total{` + sel + `}[$__rate_interval]))`, Legend: "{{node}} {{outcome}}"},
			},
		},
	}},
}
