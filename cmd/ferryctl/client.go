package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/unixsock"
)

// client talks to ferryd's debug socket.
type client struct {
	socket string
	hc     *http.Client
}

func newClient(socket string) *client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return unixsock.Dial(ctx, socket)
	}}
	return &client{socket: socket, hc: &http.Client{Transport: tr}}
}

// get decodes a JSON answer into v; error bodies become errors with ferryd's message.
func (c *client) get(ctx context.Context, path string, q url.Values, v any) error {
	return c.getWithin(ctx, path, q, v, 10*time.Second)
}

// getWithin is get for an answer that takes longer to make (a plan waits
// for the dirty-rate measurements that are due).
func (c *client) getWithin(ctx context.Context, path string, q url.Values, v any, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	resp, err := c.do(ctx, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// postQuery sends a bodiless POST with query parameters and decodes the
// JSON answer into v.
func (c *client) postQuery(ctx context.Context, path string, q url.Values, v any) error {
	return c.send(ctx, path, q, nil, v)
}

// postJSON sends body as JSON and decodes the JSON answer into v.
func (c *client) postJSON(ctx context.Context, path string, body []byte, v any) error {
	return c.send(ctx, path, nil, body, v)
}

// postJSONWithin is postJSON for an answer that takes longer to make.
func (c *client) postJSONWithin(ctx context.Context, path string, body []byte, v any, within time.Duration) error {
	return c.sendWithin(ctx, path, nil, body, v, within)
}

func (c *client) send(ctx context.Context, path string, q url.Values, body []byte, v any) error {
	return c.sendWithin(ctx, path, q, body, v, 40*time.Second)
}

func (c *client) sendWithin(ctx context.Context, path string, q url.Values, body []byte, v any, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	resp, err := c.request(ctx, http.MethodPost, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func (c *client) do(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	return c.request(ctx, http.MethodGet, path, q, nil)
}

func (c *client) request(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Response, error) {
	u := url.URL{Scheme: "http", Host: "ferryd", Path: path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if h, ok := ctx.Value(requestHeaderKey{}).([2]string); ok {
		req.Header.Set(h[0], h[1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil && ctx.Err() != context.DeadlineExceeded {
			return nil, ctx.Err()
		}
		return nil, c.unreachable(err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e api.ErrorResponse
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, &apiError{code: resp.StatusCode, msg: e.Error}
		}
		// Trimmed: the newline a plain-text error ends with would be
		// printed escaped.
		return nil, &apiError{code: resp.StatusCode, msg: strings.TrimSpace(string(body))}
	}
	return resp, nil
}

// unreachable explains why the debug socket could not be used and what
// usually fixes it.
func (c *client) unreachable(err error) *unreachableError {
	s := c.socket
	fix := "point ferryctl at ferryd's --debug-socket with --socket or FERRY_SOCKET"
	var msg string
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		msg = fmt.Sprintf("cannot reach ferryd: its debug socket %s does not exist: ferryd is not running on this node, or it serves another path (%s)", s, fix)
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("cannot reach ferryd: nothing listens on %s: the socket is left from a ferryd that is no longer running; start ferryd (on Kubernetes, check the ferry pod on this node)", s)
	case errors.Is(err, fs.ErrPermission):
		msg = fmt.Sprintf("cannot reach ferryd: permission denied on its debug socket %s%s: run ferryctl as the socket's owner (e.g. with sudo); the socket can migrate, abort and pause guests, so widen ferryd's --debug-socket-mode only to a group of node operators", s, ownerOf(s))
	case errors.Is(err, syscall.ENOTSOCK) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		msg = fmt.Sprintf("cannot reach ferryd at %s: %v: is that path ferryd's debug socket? (%s)", s, rootCause(err), fix)
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("ferryd at %s did not answer in time: it is hung or overloaded; its log says more", s)
	default:
		msg = fmt.Sprintf("cannot reach ferryd at %s: %v (is it running? %s)", s, rootCause(err), fix)
	}
	return &unreachableError{socket: s, msg: msg, err: err}
}

// ownerOf names the socket's mode and owner, or the first directory on
// its path that cannot be searched.
func ownerOf(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf(" (%v)", rootCause(err))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf(" (mode %04o, owner uid %d gid %d; you are uid %d)", fi.Mode().Perm(), st.Uid, st.Gid, os.Getuid())
	}
	return fmt.Sprintf(" (mode %04o)", fi.Mode().Perm())
}

func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// unreachableError is ferryd's debug socket failing, as opposed to ferryd
// answering no: ferryctl exits 3 on it.
type unreachableError struct {
	socket, msg string
	err         error
}

func (e *unreachableError) Error() string { return e.msg }
func (e *unreachableError) Unwrap() error { return e.err }

type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

// requestHeaderKey carries in a context one header a request adds.
type requestHeaderKey struct{}

func withRequestHeader(ctx context.Context, name, value string) context.Context {
	return context.WithValue(ctx, requestHeaderKey{}, [2]string{name, value})
}
