package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/textproto"

	"github.com/ferry-vm/ferry/api"
)

// maxQueueNotices is how many informational answers Migrate takes before
// it calls the answer broken; ferryd sends at most three.
const maxQueueNotices = 10

// Migrate is POST /v1/migrations: it starts a live migration Ferry drives
// and returns once the migration has started; the job says how it goes.
// A migration may first wait for a slot, here or on the target: with
// queued, ferryd says what for, and queued is called with each sentence
// before Migrate returns. ferryd answers 400 for a wrong request and 409
// when the domain cannot be migrated now.
func (c *Client) Migrate(ctx context.Context, req api.MigrateRequest, queued func(msg string)) (api.MigrateResponse, error) {
	if req.Socket == "" {
		req.Socket = c.libvirt
	}
	r := request{method: http.MethodPost, path: "/v1/migrations", body: req}
	if queued != nil {
		// ferryd tells only a client that asked: another would take the
		// informational answer for the final one.
		r.header = http.Header{api.QueueHeader: {"1"}}
		heard := 0
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			if heard++; heard > maxQueueNotices {
				return fmt.Errorf("ferryd sent more than %d informational answers", maxQueueNotices)
			}
			if msg := h.Get(api.QueueHeader); msg != "" {
				queued(msg)
			}
			return nil
		}})
	}
	var resp api.MigrateResponse
	err := c.call(ctx, actTimeout, r, &resp)
	return resp, err
}
