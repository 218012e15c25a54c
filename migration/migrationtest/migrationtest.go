// Package migrationtest runs a migration.Tracker's real sampler against
// fake libvirt daemons (libvirtx/libvirtxtest), for tests outside package
// migration: what a test sets on a fake reaches the tracker the way a
// libvirtd's answers and events reach ferryd's, and the test waits for the
// tracker to show it.
package migrationtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
)

// Feed is one connection of a tracker to a fake.
type Feed struct {
	cancel context.CancelFunc
	done   chan struct{}
	conn   *libvirtx.Conn
	once   sync.Once
}

// Serve connects tr to srv as ferryd's pool does (dial, subscribe to
// events, then the tracker's Serve) until the test ends or Stop. Events
// sent once it returns reach the tracker.
func Serve(t testing.TB, tr *migration.Tracker, srv *libvirtxtest.Server) *Feed {
	t.Helper()
	return serve(t, tr, srv, libvirtx.Dial)
}

// ServeMatched is Serve on a socket the launcher glob matched, a pod's, as
// the pool connects to it (libvirtx.DialMatched).
func ServeMatched(t testing.TB, tr *migration.Tracker, srv *libvirtxtest.Server) *Feed {
	t.Helper()
	return serve(t, tr, srv, libvirtx.DialMatched)
}

func serve(t testing.TB, tr *migration.Tracker, srv *libvirtxtest.Server, dial func(context.Context, string, time.Duration) (*libvirtx.Conn, error)) *Feed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := dial(ctx, srv.Path(), 0)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	events, err := c.Subscribe(ctx, 1024)
	if err != nil {
		cancel()
		c.Close()
		t.Fatal(err)
	}
	f := &Feed{cancel: cancel, done: make(chan struct{}), conn: c}
	go func() {
		defer close(f.done)
		tr.Serve(ctx, c, events)
	}()
	t.Cleanup(f.Stop)
	return f
}

// Stop ends the connection and waits until the tracker has let go of it,
// as the pool does before it tells the tracker why (Tracker.Lost).
func (f *Feed) Stop() {
	f.once.Do(func() {
		f.cancel()
		<-f.done
		f.conn.Close()
	})
}

// waitFor bounds every wait: far past a sample interval, short of the
// test's own timeout.
const waitFor = 10 * time.Second

// Wait polls ok until it holds, failing the test after a while; what says
// what was awaited.
func Wait(t testing.TB, what string, ok func() bool) {
	t.Helper()
	if !poll(ok) {
		t.Fatalf("waited %v for %s", waitFor, what)
	}
}

// WaitJob polls until the tracker's newest job of domain on socket (in
// flight, else the last finished) satisfies ok, and returns it; on
// timeout it shows the job as it last was, with its events.
func WaitJob(t testing.TB, tr *migration.Tracker, socket, domain string, what string, ok func(api.Job) bool) api.Job {
	t.Helper()
	var j api.Job
	var err error
	if poll(func() bool {
		j, err = tr.JobByName(socket, domain)
		return err == nil && ok(j)
	}) {
		return j
	}
	last := fmt.Sprint(err)
	if err == nil {
		last = fmt.Sprintf("%s %s %s, pass %d, %d ms, state %s; events:", j.Role, j.Mode, j.Phase, j.Iteration, j.ElapsedMs, j.DomainState)
		for _, e := range j.Events {
			last += fmt.Sprintf("\n\t%s %s", e.Kind, e.Detail)
		}
	}
	t.Fatalf("waited %v for %s's job on %s to be %s; it is %s", waitFor, domain, socket, what, last)
	return j
}

func poll(ok func() bool) bool {
	deadline := time.Now().Add(waitFor)
	for !ok() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
