package daemon

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The heap profile, after a collection, carries the runtime's figures of
// the live heap (what the soak judges memory growth by); the metrics
// port, which every pod reaches, does not serve it.
func TestHeapProfileIsServedOnTheDebugSocketOnly(t *testing.T) {
	d, _ := startDaemon(t)
	get := func(h http.Handler, target string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		return rec
	}
	rec := get(d.apiHandler(), "/debug/pprof/heap?gc=1&debug=1")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "# HeapAlloc = ") {
		t.Fatalf("debug socket: %d, no HeapAlloc in %.200q", rec.Code, rec.Body.String())
	}
	if rec := get(d.apiHandler(), "/debug/pprof/heap"); rec.Code != http.StatusOK || rec.Body.Len() == 0 || strings.Contains(rec.Body.String(), "# HeapAlloc") {
		t.Fatalf("debug socket, binary profile: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	if rec := get(d.metricsHandler(), "/debug/pprof/heap?debug=1"); rec.Code != http.StatusNotFound {
		t.Fatalf("metrics port served the heap profile: %d", rec.Code)
	}
}
