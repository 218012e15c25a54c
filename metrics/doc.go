// Package metrics is everything ferryd exports to Prometheus: each
// metric's name, type, help and labels, declared once here as a Def, and
// what serves them on /metrics.
//
// One file per area:
//
//	catalogue.go  Def, define and Catalogue: every declaration goes through
//	              define, so Catalogue lists all of them; docs/metrics.md
//	              is generated from it and deploy/'s alerts and dashboard
//	              are checked against it
//	job.go        the per-job families ferry_migration_*, one series per
//	              in-flight job, and which series a job has
//	node.go       the node-wide series (results, post-copy recoveries,
//	              libvirt sockets, domains needing attention, VMI marks,
//	              build) and the Collector that reads them from the
//	              tracker's snapshot
//	policy.go     the convergence policy's decisions, counted by the daemon
//	proxy.go      the migration proxy's series: built here, handed to
//	              package proxy, which counts into them
//	text.go       the fast path: per-job series written as text straight
//	              from the snapshot
//	handler.go    /metrics: the registry's node-wide series and the fast
//	              path for the text format, the registry's path for all
//	              series in other formats
//	markdown_render_test.go  docs/metrics.md from the catalogue, in a test (make generate)
//
// Imports go one way: metrics reads the tracker (migration) and the
// libvirt sockets (libvirtx) and is read by the daemon; migration,
// libvirtx and proxy never import it (proxy receives its vectors as a
// proxy.Metrics).
//
// The golden test (golden_test.go, after node_exporter's end-to-end
// fixture): testdata/story.json is one node's recorded story, libvirt's
// job statistics and events and what ferryd adds (its driver's account,
// policy decisions, proxy refusals, VMI marks), replayed into a real
// tracker (libvirt's part served by fake libvirt daemons its own sampler
// reads) and served by the real Handler; the page, with Go's version, the
// sockets' temporary directory and the order of per-job series taken out,
// must equal testdata/e2e-output.txt,
// and the registry's path must serve the same series. A metric whose
// name, labels or help change fails it until the fixture is rewritten:
// FERRY_UPDATE_DOCS=1 go test -run TestScrapeOfTheStory ./metrics/.
package metrics
