package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/internal/testsock"
	"github.com/ferry-vm/ferry/metrics"
	"github.com/ferry-vm/ferry/peer"
)

func tlsClient(raw net.Conn, p *Proxy) *tls.Conn { return tls.Client(raw, p.tls.clientConfig()) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// testMetrics are the proxy's vectors as ferryd builds them, in a
// registry of their own.
func testMetrics() Metrics { return Metrics(metrics.NewProxy(prometheus.NewRegistry())) }

// fakeIncoming stands in for the target's libvirt: Prepare listens where
// the target QEMU would, echoing every connection, and each step is
// recorded.
type fakeIncoming struct {
	mu         sync.Mutex
	prepared   []peer.IncomingMigration
	xml        []string
	cookies    [][]byte
	finished   []bool // cancelled flag of each Finish
	cancelled  []string
	prepareErr error
	finishErr  error
	// finishHold, when set, holds Finish until it is closed, as libvirt
	// holds it in post-copy.
	finishHold chan struct{}
	listeners  map[string][]net.Listener
	// running are the domains a Finish left running; outcome, when set,
	// answers Outcome instead, as a restarted node's libvirt would.
	running map[string]bool
	outcome func(peer.IncomingMigration) (string, error)
	// hold says the guest runs here in post-copy (see Held).
	hold bool
	// qemuPID, when set, is the target QEMU's pid; otherwise this
	// process's, which listens for the fake QEMU.
	qemuPID int
	// qemu, when set, starts the target QEMU listening at path (another
	// process) in place of this process's echo, and names its pid.
	qemu func(path string) int
	// monitorHeld: another client holds the QEMU monitor Prepare makes,
	// so it greets no one else.
	monitorHeld bool
	// resumes: this node's libvirt resumes post-copy itself (see
	// ResumesPostCopy); its Prepare then makes no monitor where the
	// source resumes that way too.
	resumes bool
}

// serveMonitor stands in for a QEMU's monitor: one client at a time,
// greeted at once; none while held.
func serveMonitor(ln net.Listener, held bool) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !held {
			c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		}
		io.Copy(io.Discard, c)
		c.Close()
	}
}

func (f *fakeIncoming) QEMU(string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.qemuPID != 0 {
		return f.qemuPID, nil
	}
	return os.Getpid(), nil
}

func (f *fakeIncoming) Held(context.Context, peer.IncomingMigration) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return "in post-copy here", f.hold
}

func (f *fakeIncoming) Instance(_ context.Context, m peer.IncomingMigration) (string, error) {
	return "1/" + m.ID, nil
}

func (f *fakeIncoming) Outcome(_ context.Context, m peer.IncomingMigration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.outcome != nil {
		return f.outcome(m)
	}
	if f.running[m.Domain] {
		return peer.OutcomeRunning, nil
	}
	return peer.OutcomeStopped, nil
}

// What the fake does not stand in for is refused or answered as a target
// without it would: no check beyond Prepare's, no CPU to compare, no
// direct path, nothing defined here, no recovery.
func (f *fakeIncoming) Check(peer.IncomingMigration, string) (*peer.CheckedXML, error) {
	return nil, nil
}

func (f *fakeIncoming) CompareCPU(context.Context, peer.IncomingMigration, string) (string, error) {
	return "", nil
}

func (f *fakeIncoming) PrepareDirect(context.Context, peer.IncomingMigration, string, []byte) ([]byte, string, error) {
	return nil, "", &peer.Refusal{Reason: reasonDirectUnavailable, Msg: "this fake prepares no direct migration"}
}

func (f *fakeIncoming) Persisted(context.Context, peer.IncomingMigration) bool { return false }

func (f *fakeIncoming) ResumesPostCopy(context.Context) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resumes
}

func (f *fakeIncoming) Recover(context.Context, peer.IncomingMigration, string, peer.Resume) (string, []byte, error) {
	return "", nil, &peer.Refusal{Reason: reasonIncomingDisabled, Msg: "this fake recovers no post-copy migration"}
}

func (f *fakeIncoming) Resumed(context.Context, peer.IncomingMigration, []byte, bool) ([]byte, error) {
	return nil, errors.New("this fake resumes no post-copy migration")
}

func (f *fakeIncoming) Recovered(context.Context, peer.IncomingMigration) (string, bool, error) {
	return "", false, errors.New("this fake recovers no post-copy migration")
}

func newFakeIncoming() *fakeIncoming { return &fakeIncoming{listeners: map[string][]net.Listener{}} }

func (f *fakeIncoming) Prepare(_ context.Context, m peer.IncomingMigration, xml string, cookie []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prepared = append(f.prepared, m)
	f.xml = append(f.xml, xml)
	f.cookies = append(f.cookies, cookie)
	if f.prepareErr != nil {
		return nil, f.prepareErr
	}
	if m.MonitorPath != "" && !m.LibvirtResume {
		ln, err := net.Listen("unix", m.MonitorPath)
		if err != nil {
			return nil, err
		}
		f.listeners[m.ID] = append(f.listeners[m.ID], ln)
		go serveMonitor(ln, f.monitorHeld)
	}
	for _, uri := range []string{m.MemoryURI, m.DiskURI} {
		if uri == "" {
			continue
		}
		if f.qemu != nil {
			f.qemuPID = f.qemu(strings.TrimPrefix(uri, "unix://"))
			continue
		}
		ln, err := net.Listen("unix", strings.TrimPrefix(uri, "unix://"))
		if err != nil {
			return nil, err
		}
		f.listeners[m.ID] = append(f.listeners[m.ID], ln)
		go testsock.Accept(ln, testsock.Echo)
	}
	return []byte("prepared:" + m.ID), nil
}

func (f *fakeIncoming) Finish(_ context.Context, m peer.IncomingMigration, cookie []byte, cancelled bool) ([]byte, error) {
	f.mu.Lock()
	f.finished = append(f.finished, cancelled)
	f.cookies = append(f.cookies, cookie)
	hold := f.finishHold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	f.stop(m.ID)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finishErr != nil {
		return nil, f.finishErr
	}
	if f.running == nil {
		f.running = map[string]bool{}
	}
	f.running[m.Domain] = !cancelled
	return []byte("finished:" + m.ID), nil
}

func (f *fakeIncoming) Cancel(_ context.Context, m peer.IncomingMigration) error {
	f.mu.Lock()
	f.cancelled = append(f.cancelled, m.ID)
	f.mu.Unlock()
	f.stop(m.ID)
	return nil
}

func (f *fakeIncoming) stop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ln := range f.listeners[id] {
		ln.Close()
	}
	delete(f.listeners, id)
}

func (f *fakeIncoming) cancels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cancelled...)
}

const testXML = "<domain><name>vm</name></domain>"

// prepare asks dst, from src, to prepare migration id of domain vm for
// 1+parallel memory connections (and a disk stream if disk).
func prepare(t *testing.T, src, dst *node, id string, parallel int, disk bool) peer.ControlResponse {
	t.Helper()
	return prepareAs(t, src, dst, id, "vm", parallel, disk)
}

func prepareAs(t *testing.T, src, dst *node, id, domain string, parallel int, disk bool) peer.ControlResponse {
	t.Helper()
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: id, Domain: domain,
		XML: testXML, Cookie: []byte("begin"), Flags: 1, Parallel: parallel, Disk: disk})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func finish(t *testing.T, src, dst *node, id string, cancelled bool) peer.ControlResponse {
	t.Helper()
	resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpFinish, Migration: id, Domain: "vm",
		Cookie: []byte("perform"), Cancelled: cancelled})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
