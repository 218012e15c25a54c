package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/ferry-vm/ferry/api"
)

// maxUpdate is the longest update a Stream reads: a job with its
// iterations and events, with room to spare.
const maxUpdate = 1 << 20

// Watch is GET /v1/watch: job updates as ferryd makes them, of every job,
// or of domain's alone when it is not empty. The stream has no deadline:
// it lasts until ctx ends, Close, or ferryd goes away.
func (c *Client) Watch(ctx context.Context, domain string) (*Stream, error) {
	q := c.domainQuery()
	if domain != "" {
		q.Set("domain", domain)
	}
	resp, err := c.open(ctx, request{method: http.MethodGet, path: "/v1/watch", query: q})
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxUpdate)
	s := &Stream{socket: c.socket, ctx: ctx, body: resp.Body, sc: sc}
	// A read blocked on a quiet stream ends with ctx, not at the next
	// update.
	s.stop = context.AfterFunc(ctx, func() { resp.Body.Close() })
	return s, nil
}

// Stream is a watch's updates, read one at a time:
//
//	for s.Next() {
//		j := s.Job()
//	}
//	err := s.Err()
//
// It is not safe for concurrent use, but Close may be called from any
// goroutine to end a Next waiting for an update.
type Stream struct {
	socket string
	ctx    context.Context
	body   io.ReadCloser
	sc     *bufio.Scanner
	stop   func() bool
	closed atomic.Bool
	job    api.Job
	err    error
}

// Next waits for the next update and reports whether there is one; once
// it returns false, Err says why the stream ended.
func (s *Stream) Next() bool {
	if s.err != nil || s.closed.Load() {
		return false
	}
	if !s.sc.Scan() {
		s.err = s.ended()
		return false
	}
	var j api.Job
	if err := json.Unmarshal(s.sc.Bytes(), &j); err != nil {
		s.err = fmt.Errorf("ferryd sent an unreadable update: %v", err)
		return false
	}
	s.job = j
	return true
}

// Job is the update Next read.
func (s *Stream) Job() api.Job { return s.job }

// Raw is the update Next read as ferryd sent it, one JSON document
// without its newline, fields a newer ferryd added included. It is valid
// until the next call of Next.
func (s *Stream) Raw() []byte { return s.sc.Bytes() }

// Err is why the stream ended: nil when Close ended it, ctx's error when
// ctx did, or an *UnreachableError when ferryd closed the stream or it
// broke (ferryd ends a watch only when it stops).
func (s *Stream) Err() error { return s.err }

// Close ends the stream.
func (s *Stream) Close() error {
	s.closed.Store(true)
	s.stop()
	return s.body.Close()
}

// ended says why the scan stopped.
func (s *Stream) ended() error {
	if s.closed.Load() {
		return nil
	}
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if err := s.sc.Err(); err != nil {
		return &UnreachableError{Socket: s.socket, Err: err, msg: fmt.Sprintf("the watch stream from ferryd at %s broke: %v", s.socket, err)}
	}
	return &UnreachableError{Socket: s.socket, msg: fmt.Sprintf("ferryd at %s closed the watch stream (restarting?)", s.socket)}
}
