package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/daemon"
	"github.com/ferry-vm/ferry/internal/testsock"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
)

// TestMain lets the test binary stand in for the ferryctl binary, so that
// shell completion scripts and runs as another user exercise the program.
func TestMain(m *testing.M) {
	if os.Getenv("FERRYCTL_TEST_AS_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// ferryd runs the real daemon in-process on a debug socket in a fresh
// directory, its pool reading the fake libvirt daemons given, or else one
// in that directory: the test sets on them what libvirt says. lv is the
// first.
func ferryd(t *testing.T, libvirts ...*libvirtxtest.Server) (sock string, tr *migration.Tracker, lv *libvirtxtest.Server) {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	if len(libvirts) == 0 {
		libvirts = append(libvirts, libvirtxtest.New(t, filepath.Join(dir, "libvirt-sock")))
	}
	var sockets []string
	for _, l := range libvirts {
		sockets = append(sockets, l.Path())
	}
	sock = filepath.Join(dir, "ferry.sock")
	d, err := daemon.New(daemon.Config{
		NodeName: "node-a", DebugSocket: sock, DebugSocketMode: 0o600,
		// The shortest interval ferryd takes: what a test sets is read soon.
		LibvirtSockets: sockets, SampleInterval: 100 * time.Millisecond,
		StateDir: filepath.Join(dir, "state"),
	}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	testsock.Run(t, d.Run, sock)
	return sock, d.Tracker, libvirts[0]
}

func testDomain(name string) libvirtxtest.Domain {
	return libvirtxtest.Domain{Name: name, UUID: libvirt.UUID{1, 2, 3}, ID: 1, State: int32(libvirtx.StateRunning), Reason: 1}
}

// migrating has libvirt run name with a source job at one reading of a
// pre-copy pass, and returns once ferryd shows it.
func migrating(t *testing.T, tr *migration.Tracker, lv *libvirtxtest.Server, name string, remaining uint64) {
	t.Helper()
	lv.SetDomain(testDomain(name))
	lv.SetJob(name, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
		TimeElapsedMs: 2000, MemoryIteration: 2, DataTotal: 512 << 20, MemoryTotal: 512 << 20, DataRemaining: remaining,
		MemoryRemaining: remaining, DataProcessed: 600 << 20, MemoryBps: 100 << 20, MemoryDirtyRate: 20 << 20})
	migrationtest.WaitJob(t, tr, lv.Path(), name, "migrating", func(j api.Job) bool {
		return j.Phase == api.PhaseRunning && j.DataRemainingBytes == remaining
	})
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
