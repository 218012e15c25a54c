package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/ferry-vm/ferry/api"
)

// Jobs is GET /v1/jobs: the jobs in flight, and with all those finished
// too, as far as ferryd keeps them.
func (c *Client) Jobs(ctx context.Context, all bool) (api.JobsResponse, error) {
	q := url.Values{}
	if all {
		q.Set("all", "1")
	}
	var resp api.JobsResponse
	err := c.call(ctx, readTimeout, request{method: http.MethodGet, path: "/v1/jobs", query: q}, &resp)
	return resp, err
}

// Job is GET /v1/jobs/{domain}: the domain's latest job, with its
// iterations and events. ferryd answers 404 when it has no job of the
// domain.
func (c *Client) Job(ctx context.Context, domain string) (api.Job, error) {
	var j api.Job
	err := c.call(ctx, readTimeout, request{method: http.MethodGet, path: domainPath("/v1/jobs/", domain, ""), query: c.domainQuery()}, &j)
	return j, err
}

// Abort is POST /v1/jobs/{domain}/abort: it asks for the abort and
// returns once ferryd has it under way; the job says how it ends. A
// post-copy migration cannot be cancelled, only paused, which ferryd
// refuses (409) unless force.
func (c *Client) Abort(ctx context.Context, domain string, force bool) (api.AbortResult, error) {
	q := c.domainQuery()
	if force {
		q.Set("force", "1")
	}
	var res api.AbortResult
	err := c.call(ctx, actTimeout, request{method: http.MethodPost, path: domainPath("/v1/jobs/", domain, "/abort"), query: q}, &res)
	return res, err
}

// PostCopy is POST /v1/jobs/{domain}/postcopy: it switches the domain's
// running migration, started with post-copy allowed, to post-copy.
func (c *Client) PostCopy(ctx context.Context, domain string) (api.AbortResult, error) {
	var res api.AbortResult
	err := c.call(ctx, actTimeout, request{method: http.MethodPost, path: domainPath("/v1/jobs/", domain, "/postcopy"), query: c.domainQuery()}, &res)
	return res, err
}

// Keep is which copy of a guest in doubt Resolve keeps.
type Keep string

const (
	// KeepSource resumes the copy paused on the source: only once the
	// target's copy is known to be gone.
	KeepSource Keep = "source"
	// KeepTarget ends the copy on the source: the guest runs on the target.
	KeepTarget Keep = "target"
)

// Resolve is POST /v1/jobs/{domain}/resolve: it settles a migration in
// doubt (phase InDoubt) by the operator's word. ferryd answers 409 when
// no migration of the domain is in doubt on this node.
func (c *Client) Resolve(ctx context.Context, domain string, keep Keep) (api.MessageResponse, error) {
	q := c.domainQuery()
	q.Set("keep", string(keep))
	var res api.MessageResponse
	err := c.call(ctx, actTimeout, request{method: http.MethodPost, path: domainPath("/v1/jobs/", domain, "/resolve"), query: q}, &res)
	return res, err
}

// Recover is POST /v1/jobs/{domain}/recover: a paused post-copy's
// recovery tries again now, or starts again after it was given up.
func (c *Client) Recover(ctx context.Context, domain string) (api.MessageResponse, error) {
	return c.recovery(ctx, domain, "/recover")
}

// GiveUp is POST /v1/jobs/{domain}/give-up: a paused post-copy's recovery
// ends, and the guest is declared lost.
func (c *Client) GiveUp(ctx context.Context, domain string) (api.MessageResponse, error) {
	return c.recovery(ctx, domain, "/give-up")
}

func (c *Client) recovery(ctx context.Context, domain, verb string) (api.MessageResponse, error) {
	var res api.MessageResponse
	err := c.call(ctx, actTimeout, request{method: http.MethodPost, path: domainPath("/v1/jobs/", domain, verb), query: c.domainQuery()}, &res)
	return res, err
}
