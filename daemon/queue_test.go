package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"testing"

	"github.com/ferry-vm/ferry/api"
)

// A migration request that queues hears so before its answer, at most
// maxQueueNotices times, and the answer itself still arrives whole.
func TestQueueNoticesReachTheClientBeforeTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tell := queueNotices(w)
		for i := range 5 {
			tell(fmt.Sprintf("waiting: %d ahead", 5-i))
		}
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"migrationId":"m-1"}`)
	}))
	defer srv.Close()
	var heard []string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		heard = append(heard, fmt.Sprintf("%d %s", code, h.Get(api.QueueHeader)))
		return nil
	}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted || string(body) != `{"migrationId":"m-1"}` || resp.Header.Get(api.QueueHeader) != "" {
		t.Fatalf("answer %d %q, header %q", resp.StatusCode, body, resp.Header.Get(api.QueueHeader))
	}
	want := []string{"102 waiting: 5 ahead", "102 waiting: 4 ahead", "102 waiting: 3 ahead"}
	if fmt.Sprint(heard) != fmt.Sprint(want) {
		t.Fatalf("heard %q, want %q", heard, want)
	}
}
