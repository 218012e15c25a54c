package client_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/ferry-vm/ferry/api"
)

// ferryd sends at most three notices; a peer sending without end is cut off.
func TestMigrateTakesFewNotices(t *testing.T) {
	cl := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		for range 20 {
			w.Header().Set(api.QueueHeader, "waiting")
			w.WriteHeader(http.StatusProcessing)
		}
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"migrationId":"m-1"}`)
	})
	heard := 0
	_, err := cl.Migrate(context.Background(), api.MigrateRequest{Domain: "vm1"}, func(string) { heard++ })
	if err == nil || heard != 10 {
		t.Errorf("heard %d notices, err %v; want 10 and an error", heard, err)
	}
}
