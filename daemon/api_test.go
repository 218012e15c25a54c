package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
)

// No libvirt here can put a job in post-copy, so the tracker's refusal is
// stood in for; the refusal itself is tested in migration.
func TestAbortInPostCopyWithoutForceIsConflict(t *testing.T) {
	const refusal = "sda's migration is in post-copy, so an abort would not cancel it but pause it: ... ferryctl abort sda --force"
	var gotForce []bool
	mux := http.NewServeMux()
	mux.Handle("POST /v1/jobs/{domain}/abort", abortHandler(func(_ context.Context, _, domain string, force bool) (api.AbortResult, error) {
		gotForce = append(gotForce, force)
		if !force {
			return api.AbortResult{}, fmt.Errorf("%w: %s", migration.ErrPostCopyNeedsForce, refusal)
		}
		return api.AbortResult{Job: api.Job{Domain: domain, Mode: api.ModePostCopy}, Message: "forced abort in post-copy"}, nil
	}, zap.NewNop()))

	for _, c := range []struct {
		query string
		code  int
		says  string
	}{
		{"", http.StatusConflict, refusal},
		{"?force=0", http.StatusConflict, refusal},
		{"?force=1", http.StatusAccepted, "forced abort in post-copy"},
		{"?force=true", http.StatusAccepted, "forced abort in post-copy"},
		{"?force=please", http.StatusBadRequest, "not a boolean"},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/jobs/sda/abort"+c.query, nil))
		var body struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		json.NewDecoder(rec.Body).Decode(&body)
		if rec.Code != c.code || !strings.Contains(body.Error+body.Message, c.says) {
			t.Errorf("abort%s: %d %+v, want %d saying %q", c.query, rec.Code, body, c.code, c.says)
		}
	}
	if want := []bool{false, false, true, true}; fmt.Sprint(gotForce) != fmt.Sprint(want) {
		t.Errorf("force reached the tracker as %v, want %v", gotForce, want)
	}
}

func TestAbortForceParameterIsChecked(t *testing.T) {
	_, hc := startDaemon(t)
	for query, want := range map[string]int{"?force=maybe": http.StatusBadRequest, "?force=1": http.StatusNotFound} {
		resp, err := hc.Post("http://ferryd/v1/jobs/nosuchdomain/abort"+query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("abort%s: %d, want %d", query, resp.StatusCode, want)
		}
	}
}
