package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
)

// serve runs h on a unix socket in the test's directory.
func serve(t *testing.T, h http.HandlerFunc) *client.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "ferry.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return client.New(sock)
}

func TestRefusalsCarryFerrydsMessageAndStatus(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"ferryd's JSON", http.StatusConflict, `{"error":"domain name served by more than one libvirt socket"}`, "domain name served by more than one libvirt socket"},
		{"plain text", http.StatusServiceUnavailable, "starting: libvirt sockets not scanned yet\n", "starting: libvirt sockets not scanned yet"},
		{"JSON without a message", http.StatusBadRequest, `{"error":""}`, `{"error":""}`},
		{"nothing", http.StatusBadGateway, "", "ferryd answered 502 Bad Gateway with no reason"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			})
			_, err := cl.Job(context.Background(), "vm1")
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %T %v, want a *client.Error", err, err)
			}
			if e.Status != c.status || e.Message != c.want || err.Error() != c.want {
				t.Errorf("got status %d, message %q, Error() %q; want %d, %q", e.Status, e.Message, err.Error(), c.status, c.want)
			}
		})
	}
}

func TestAnUnreadableAnswerSaysWhichRequest(t *testing.T) {
	cl := serve(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "<html>") })
	_, err := cl.Plan(context.Background(), api.PlanRequest{Targets: []string{"node-b"}})
	if err == nil || !strings.Contains(err.Error(), "reading ferryd's answer to GET /v1/plan") {
		t.Errorf("got %v, want an error naming the request", err)
	}
}

func TestUnreachableSocketsSayWhereAndWhy(t *testing.T) {
	stale := filepath.Join(t.TempDir(), "ferry.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	for _, c := range []struct {
		socket string
		says   []string
	}{
		{"/nonexistent/ferry.sock", []string{"its debug socket /nonexistent/ferry.sock does not exist", "not running", "--socket or FERRY_SOCKET"}},
		{stale, []string{"nothing listens on " + stale, "start ferryd"}},
	} {
		_, err := client.New(c.socket).Jobs(context.Background(), false)
		var un *client.UnreachableError
		if !errors.As(err, &un) || un.Socket != c.socket {
			t.Fatalf("%s: got %T %v, want an *UnreachableError naming the socket", c.socket, err, err)
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", c.socket, err, s)
			}
		}
	}
}

func TestAFerrydThatDoesNotAnswerIsUnreachableInTime(t *testing.T) {
	hung := make(chan struct{})
	defer close(hung)
	cl := serve(t, func(http.ResponseWriter, *http.Request) { <-hung })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := cl.Jobs(ctx, false)
	var un *client.UnreachableError
	if !errors.As(err, &un) || !strings.Contains(err.Error(), "did not answer in time") {
		t.Errorf("got %T %v, want an *UnreachableError saying ferryd did not answer in time", err, err)
	}
}

// The caller's cancellation is theirs, not ferryd's failure.
func TestACancelledRequestIsTheCallers(t *testing.T) {
	hung := make(chan struct{})
	defer close(hung)
	cl := serve(t, func(http.ResponseWriter, *http.Request) { <-hung })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := cl.Abort(ctx, "vm1", false)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %T %v, want context.Canceled", err, err)
	}
	var un *client.UnreachableError
	if errors.As(err, &un) {
		t.Errorf("a cancellation is called unreachable: %v", err)
	}
}
