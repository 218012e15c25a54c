package main

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
	"time"
)

// client talks to ferryd's debug socket.
type client struct {
	socket string
	hc     *http.Client
}

func newClient(socket string) *client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &client{socket: socket, hc: &http.Client{Transport: tr}}
}

// get decodes a JSON answer into v; error bodies become errors with ferryd's message.
func (c *client) get(ctx context.Context, path string, q url.Values, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.do(ctx, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// post sends a bodiless POST and decodes the JSON answer into v.
func (c *client) post(ctx context.Context, path string, v any) error {
	return c.postJSON(ctx, path, nil, v)
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

func (c *client) send(ctx context.Context, path string, q url.Values, body []byte, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
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
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return nil, fmt.Errorf("cannot reach ferryd at %s (is it running? set --socket or FERRY_SOCKET): %v", c.socket, op.Err)
		}
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, &apiError{code: resp.StatusCode, msg: e.Error}
		}
		return nil, &apiError{code: resp.StatusCode, msg: string(body)}
	}
	return resp, nil
}

type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }
