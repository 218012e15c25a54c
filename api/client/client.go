// Package client speaks ferryd's debug API over its node-local unix
// socket: one method per /v1 route, taking and returning package api's
// types. A refusal from ferryd is an *Error carrying its message and HTTP
// status; a socket that cannot be used is an *UnreachableError saying why
// and what usually fixes it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/unixsock"
)

// How long each kind of request may take unless ctx ends it sooner.
const (
	// readTimeout bounds a read of ferryd's state.
	readTimeout = 10 * time.Second
	// actTimeout bounds a request ferryd carries out on libvirt or a peer:
	// ferryd bounds its own calls at 30s or less, and answers within this.
	actTimeout = 40 * time.Second
	// planTimeout bounds a plan, and an evacuation's start, which plans
	// first: ferryd's own bound (it measures the guests whose dirty rate is
	// due) and a little more.
	planTimeout = 2*time.Minute + 5*time.Second
)

// Client talks to one ferryd. It is safe for concurrent use, and keeps
// no connection between requests.
type Client struct {
	socket string
	// libvirt names the libvirt socket serving the domains requests name.
	libvirt string
	hc      *http.Client
}

// New returns a client of the ferryd whose debug socket is at socket.
// Nothing is dialed until a request is made.
func New(socket string) *Client {
	// A connection per request: one is cheap on a local socket, an idle
	// one would hold a descriptor in ferryd for nothing, and one kept
	// across a restart of ferryd would fail the next request sent on it.
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		// However long the path: unixsock dials past sun_path's limit.
		return unixsock.Dial(ctx, socket)
	}}
	return &Client{socket: socket, hc: &http.Client{Transport: tr}}
}

// WithLibvirtSocket returns a client that names, with each domain it asks
// about, the libvirt socket serving it: needed only where two libvirt
// sockets serve a domain of that name, and ferryd refuses the name alone
// (409). It applies to the query of every route naming a domain, to
// Watch's filter, and to the Socket of a DryRunRequest or MigrateRequest
// that leaves it empty. The two clients share their connections.
func (c *Client) WithLibvirtSocket(path string) *Client {
	cc := *c
	cc.libvirt = path
	return &cc
}

// request is one call on the debug API.
type request struct {
	method string
	// path is escaped: domain names are escaped once, by domainPath.
	path  string
	query url.Values
	// body, when not nil, is sent as JSON.
	body   any
	header http.Header
}

// domainPath is route's path for a domain, its name escaped as a single
// path segment.
func domainPath(prefix, name, suffix string) string {
	return prefix + url.PathEscape(name) + suffix
}

// domainQuery is the query naming the client's libvirt socket, if any.
func (c *Client) domainQuery() url.Values {
	q := url.Values{}
	if c.libvirt != "" {
		q.Set("socket", c.libvirt)
	}
	return q
}

// call makes req within the time given and decodes ferryd's JSON answer
// into out.
func (c *Client) call(ctx context.Context, within time.Duration, req request, out any) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	resp, err := c.open(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("reading ferryd's answer to %s %s: %w", req.method, req.path, err)
	}
	return nil
}

// open sends req and returns ferryd's answer once it is a success; its
// body is the caller's to close.
func (c *Client) open(ctx context.Context, req request) (*http.Response, error) {
	var body io.Reader
	if req.body != nil {
		b, err := json.Marshal(req.body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request for %s %s: %w", req.method, req.path, err)
		}
		body = bytes.NewReader(b)
	}
	u := "http://ferryd" + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return nil, err
	}
	for k, v := range req.header {
		hr.Header[k] = v
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		// The caller's cancellation is theirs to tell; a deadline passing
		// says ferryd did not answer, which unreachable explains.
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, ctx.Err()
		}
		return nil, c.unreachable(err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, refusal(resp)
	}
	return resp, nil
}

// refusal is ferryd's error answer as an *Error: its JSON message, or the
// plain text a handler outside ferryd's own (a proxy, /readyz) sent.
func refusal(resp *http.Response) *Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e api.ErrorResponse
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return &Error{Status: resp.StatusCode, Message: e.Error}
	}
	// Trimmed: the newline a plain-text error ends with would be printed
	// escaped.
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = fmt.Sprintf("ferryd answered %s with no reason", resp.Status)
	}
	return &Error{Status: resp.StatusCode, Message: msg}
}
