package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Requests on the debug socket, as any local user who may reach it sends
// them: the API never panics, never fails inside (500), and every answer
// is JSON (but the mux's redirects of unclean paths). The daemon has no libvirt, so no request can start anything.
func FuzzDebugAPI(f *testing.F) {
	d, _ := startDaemon(f)
	h := d.apiHandler()
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete}
	f.Add(uint8(1), "/v1/migrations", `{"domain":"vm","target":"127.0.0.1:9475","targetNode":"b"}`)
	f.Add(uint8(1), "/v1/jobs/vm/abort?force=1", "")
	f.Add(uint8(1), "/v1/jobs/a%2Fb/postcopy", "")
	f.Add(uint8(0), "/v1/jobs/..%2F..%2Fetc", "")
	f.Add(uint8(0), "/v1/watch?domain=vm", "")
	f.Add(uint8(1), "/v1/migrations", `{"domain":"vm","bandwidthMiBs":-1,"policy":{"mode":"act"}}`)
	f.Fuzz(func(t *testing.T, m uint8, target, body string) {
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \t\r\n#") || strings.Contains(target, "metrics") {
			return
		}
		req, err := http.NewRequest(methods[int(m)%len(methods)], "http://ferryd"+target, strings.NewReader(body))
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code >= 500 && rec.Code != http.StatusBadGateway {
			t.Fatalf("%s %s: %d %s", req.Method, target, rec.Code, rec.Body)
		}
		if strings.HasPrefix(target, "/v1/watch") || rec.Code/100 == 3 {
			return // a stream of JSON lines cut by the deadline; the mux's redirect to a clean path
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s: %d, not JSON: %q", req.Method, target, rec.Code, rec.Body)
		}
	})
}
