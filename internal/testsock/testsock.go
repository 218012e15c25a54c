// Package testsock holds the unix-socket servers tests stand in for QEMU,
// libvirt, a peer or ferryd itself with: one of each, shared.
package testsock

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Serve listens on path and runs handle on each connection, closing it
// when handle returns; the listener closes when the test ends.
func Serve(t testing.TB, path string, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go Accept(ln, handle)
	return ln
}

// Accept runs handle on each of ln's connections until ln closes.
func Accept(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// Echo sends back what it reads until the peer half-closes: a relay must
// carry the half-close both ways for an echo through it to end.
func Echo(c net.Conn) { io.Copy(c, c) }

// Hold keeps the connection open until the peer closes it.
func Hold(c net.Conn) { io.Copy(io.Discard, c) }

// Run runs a server (a ferryd's Run) until the test ends, then checks it
// stopped cleanly, and returns once its unix socket answers.
func Run(t testing.TB, run func(context.Context) error, socket string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server on %s: %v", socket, err)
		}
	})
	for range 200 {
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("nothing answered on %s", socket)
}

// HTTPClient speaks HTTP over the unix socket, whatever the URL's host.
func HTTPClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
}
