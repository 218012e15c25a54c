package metrics

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// docPath is where markdown's page is kept, from the repository's root.
const docPath = "docs/metrics.md"

// markdown renders the catalogue as docs/metrics.md: a short introduction,
// then one table row per metric, sorted by name.
func markdown() []byte {
	var b bytes.Buffer
	b.WriteString(`# Metrics

<!-- Generated from package metrics by make generate; edit the declarations there, not this file. -->

Everything ferryd exports on ` + "`/metrics`" + ` (the address of ` + "`--metrics-addr`" + `, :9474 by default,
and the debug socket), generated from the declarations in ` + "[`metrics/`](../metrics/)" + `,
where each metric is declared once: a test fails while this page differs
from them, and ` + "`make generate`" + ` writes it anew. Beside them ferryd serves
the Go runtime's and the process's own series, as every exporter does
(` + "`go_goroutines`, `process_resident_memory_bytes`, `process_open_fds`" + `, ...).

Scope says which part of ferryd serves a metric:

- **job**: one series per migration job in flight on the node, source or
  target, gone when the job ends. Their labels (*job* in the table) are
  ` + labelList(JobLabels) + `, then the metric's own.
  ` + "`namespace`" + ` and ` + "`name`" + ` are a KubeVirt VMI's when the domain is named
  ` + "`<namespace>_<name>`" + `, else empty; ` + "`socket`" + ` keeps apart one domain name on
  two libvirt sockets. A target job has no libvirt statistics, so only
  ` + "`ferry_migration_info`" + `, ` + "`_elapsed_seconds`" + ` and ` + "`_vmi_info`" + `.
- **node**: node-wide, from the tracker, the libvirt sockets and the
  KubeVirt reporter.
- **policy**: the convergence policy's decisions.
- **proxy**: the migration proxy. These series carry no ` + "`node`" + ` label of their
  own: the ServiceMonitor (` + "`deploy/service.yaml`" + `) gives them the node the pod
  runs on, and series with a ` + "`node`" + ` label of their own keep it.

A series that cannot be served (a label that is not valid UTF-8) is logged
and left out; it never fails the rest of the page.

| Metric | Type | Scope | Labels | Description |
|---|---|---|---|---|
`)
	for _, d := range Catalogue() {
		labels := labelList(d.Labels)
		if d.Area == AreaJob {
			labels = strings.TrimSuffix("*job*, "+labelList(d.Labels[len(JobLabels):]), ", ")
		}
		if labels == "" {
			labels = "none"
		}
		help := cell(d.Help)
		if d.Type == Histogram {
			bs := make([]string, len(d.Buckets))
			for i, v := range d.Buckets {
				bs[i] = strconv.FormatFloat(v, 'g', -1, 64)
			}
			help += " Buckets: " + strings.Join(bs, ", ") + "."
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", d.Name, d.Type, d.Area, labels, help)
	}
	return b.Bytes()
}

func labelList(ls []string) string {
	q := make([]string, len(ls))
	for i, l := range ls {
		q[i] = "`" + l + "`"
	}
	return strings.Join(q, ", ")
}

// cell makes text safe in a table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
