package daemon

import (
	"net/http"
	"runtime"
	"runtime/pprof"
)

// heapProfile serves the Go heap profile, on the debug socket only (it is
// for the node's own operators). gc=1 collects garbage first, twice (the
// first only moves pooled buffers aside), so that the figures are of the
// live heap alone, which is what a leak grows.
func (d *Daemon) heapProfile(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
		runtime.GC()
	}
	debug := 0
	if r.URL.Query().Get("debug") == "1" {
		debug = 1
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="heap"`)
	}
	if err := pprof.Lookup("heap").WriteTo(w, debug); err != nil {
		writeError(w, http.StatusInternalServerError, "writing the heap profile: "+err.Error())
	}
}
