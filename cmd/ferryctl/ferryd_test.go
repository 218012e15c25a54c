package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/daemon"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// TestMain lets the test binary stand in for the ferryctl binary, so that
// shell completion scripts and runs as another user exercise the program.
func TestMain(m *testing.M) {
	if os.Getenv("FERRYCTL_TEST_AS_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// jobSocket is the libvirt socket the test jobs are on; ferryd does not
// connect to it, so nothing but the test feeds its tracker.
const jobSocket = "/run/libvirt/libvirt-sock"

// ferryd runs the real daemon in-process on a debug socket in a fresh
// directory, with no libvirt to read: the test feeds its tracker the
// readings libvirt would give.
func ferryd(t *testing.T) (string, *migration.Tracker) {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	d, err := daemon.New(daemon.Config{
		NodeName: "node-a", DebugSocket: filepath.Join(dir, "ferry.sock"), DebugSocketMode: 0o600,
		LibvirtSockets: []string{filepath.Join(dir, "no-libvirt-here")}, SampleInterval: time.Second,
		StateDir: filepath.Join(dir, "state"),
	}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ferryd: %v", err)
		}
	})
	sock := filepath.Join(dir, "ferry.sock")
	for range 200 {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock, d.Tracker
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("ferryd's debug socket never answered")
	return "", nil
}

func testDomain(name string) libvirtx.Domain {
	return libvirtx.Domain{Ref: libvirt.Domain{Name: name, UUID: libvirt.UUID{1, 2, 3}}, Name: name,
		UUID: "01020300-0000-0000-0000-000000000000", State: libvirtx.StateRunning, Reason: 1}
}

// migrating starts a source job for name: one reading of a pre-copy pass.
func migrating(tr *migration.Tracker, name string, remaining uint64) libvirtx.Domain {
	d := testDomain(name)
	tr.ApplyDomains(jobSocket, []libvirtx.Domain{d}, time.Now())
	tr.ApplyStats(jobSocket, d, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
		TimeElapsedMs: 2000, MemoryIteration: 2, DataTotal: 512 << 20, MemoryTotal: 512 << 20, DataRemaining: remaining,
		MemoryRemaining: remaining, DataProcessed: 600 << 20, MemoryBps: 100 << 20, MemoryDirtyRate: 20 << 20}, time.Now())
	return d
}

// ctl runs ferryctl in-process.
func ctl(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// ferryctlBinary is the test binary under the name ferryctl, run as the
// program by TestMain.
func ferryctlBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	bin := filepath.Join(dir, "ferryctl")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// asMainEnv runs the test binary as ferryctl, without the race detector's
// second of sleep at exit.
var asMainEnv = []string{"FERRYCTL_TEST_AS_MAIN=1", "FERRY_SOCKET=", "GORACE=atexit_sleep_ms=0"}

func ferryctlCommand(bin string, args ...string) *exec.Cmd {
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), asMainEnv...)
	return c
}

// syncBuffer is written by a running ferryctl while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
