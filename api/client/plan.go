package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ferry-vm/ferry/api"
)

// Plan is GET /v1/plan: how the node's domains would leave it, nothing
// moved. req's fields go as query parameters; DryRun has no meaning here.
// ferryd measures the guests whose dirty rate is due first, so a plan may
// take two minutes.
func (c *Client) Plan(ctx context.Context, req api.PlanRequest) (api.Plan, error) {
	q := url.Values{}
	q.Set("to", strings.Join(req.Targets, ","))
	q.Set("parallel", strconv.Itoa(req.Parallel))
	q.Set("bandwidthMiBs", strconv.Itoa(req.BandwidthMiBs))
	var p api.Plan
	err := c.call(ctx, planTimeout, request{method: http.MethodGet, path: "/v1/plan", query: q}, &p)
	return p, err
}

// Evacuate is POST /v1/evacuations: it plans as Plan does, starts moving
// the domains, and returns the evacuation as it starts (Running); follow
// it with Evacuation. ferryd answers 409 while another runs.
func (c *Client) Evacuate(ctx context.Context, req api.PlanRequest) (api.Evacuation, error) {
	var ev api.Evacuation
	err := c.call(ctx, planTimeout, request{method: http.MethodPost, path: "/v1/evacuations", body: req}, &ev)
	return ev, err
}

// Evacuation is GET /v1/evacuation: the node's latest evacuation, running
// or ended. ferryd answers 404 when there was none since it started.
func (c *Client) Evacuation(ctx context.Context) (api.Evacuation, error) {
	var ev api.Evacuation
	err := c.call(ctx, readTimeout, request{method: http.MethodGet, path: "/v1/evacuation"}, &ev)
	return ev, err
}
