package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/ferry-vm/ferry/api"
)

// Domains is GET /v1/domains: the node's domains, their states, and
// ferryd's connection to each libvirt socket. With check, each domain
// says whether it can move, which costs ferryd a read of each one's XML.
func (c *Client) Domains(ctx context.Context, check bool) (api.DomainsResponse, error) {
	var q url.Values
	if check {
		q = url.Values{"check": {"1"}}
	}
	var resp api.DomainsResponse
	err := c.call(ctx, readTimeout, request{method: http.MethodGet, path: "/v1/domains", query: q}, &resp)
	return resp, err
}

// Check is GET /v1/domains/{name}/check: what the live domain holds that
// keeps it on this node.
func (c *Client) Check(ctx context.Context, domain string) (api.CheckResponse, error) {
	var resp api.CheckResponse
	err := c.call(ctx, readTimeout, request{method: http.MethodGet, path: domainPath("/v1/domains/", domain, "/check"), query: c.domainQuery()}, &resp)
	return resp, err
}

// DryRun is POST /v1/domains/{name}/check: Check, and the migration
// protocol run up to the target's prepare and cancelled, no memory sent.
// The answer's DryRun says what the target said.
func (c *Client) DryRun(ctx context.Context, domain string, req api.DryRunRequest) (api.CheckResponse, error) {
	if req.Socket == "" {
		req.Socket = c.libvirt
	}
	var resp api.CheckResponse
	err := c.call(ctx, actTimeout, request{method: http.MethodPost, path: domainPath("/v1/domains/", domain, "/check"), body: req}, &resp)
	return resp, err
}

// Proxy is GET /v1/proxy: the migration proxy's mode and the incoming
// migrations it holds.
func (c *Client) Proxy(ctx context.Context) (api.ProxyResponse, error) {
	var resp api.ProxyResponse
	err := c.call(ctx, readTimeout, request{method: http.MethodGet, path: "/v1/proxy"}, &resp)
	return resp, err
}
