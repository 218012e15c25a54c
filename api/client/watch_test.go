package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api/client"
)

// ferryd ends a watch only when it stops: the stream's end is ferryd going
// away, and says so.
func TestAWatchFerrydEndsIsUnreachable(t *testing.T) {
	cl := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"domain":"vm1","phase":"Running","newField":1}`+"\n")
	})
	s, err := cl.Watch(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Next() || s.Job().Domain != "vm1" || string(s.Raw()) != `{"domain":"vm1","phase":"Running","newField":1}` {
		t.Fatalf("first update: %v, job %+v, raw %q", s.Err(), s.Job(), s.Raw())
	}
	if s.Next() {
		t.Fatal("an update after the stream ended")
	}
	var un *client.UnreachableError
	if !errors.As(s.Err(), &un) || !strings.Contains(s.Err().Error(), "closed the watch stream (restarting?)") {
		t.Errorf("got %T %v, want an *UnreachableError saying ferryd closed the stream", s.Err(), s.Err())
	}
}

func TestAnUnreadableUpdateEndsTheWatch(t *testing.T) {
	cl := serve(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "not json\n") })
	s, err := cl.Watch(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Next() || s.Err() == nil || !strings.Contains(s.Err().Error(), "ferryd sent an unreadable update") {
		t.Errorf("err %v, want one saying the update was unreadable", s.Err())
	}
}

// A watch waiting on a quiet stream ends with its context, or with Close
// from another goroutine; neither is ferryd's failure.
func TestAQuietWatchEndsWithItsContextOrClose(t *testing.T) {
	quiet := func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := serve(t, quiet).Watch(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if s.Next() || !errors.Is(s.Err(), context.Canceled) {
		t.Errorf("after the context ended: err %v, want context.Canceled", s.Err())
	}
	s.Close()

	s, err = serve(t, quiet).Watch(context.Background(), "vm1")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { s.Close() })
	if s.Next() || s.Err() != nil {
		t.Errorf("after Close: err %v, want none", s.Err())
	}
}
