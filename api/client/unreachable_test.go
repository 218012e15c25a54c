package client

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Each way the socket fails says why in words that lead to the fix, from
// the errors net and net/http return; a permission refusal names the
// socket's owner, which a test run as root cannot provoke.
func TestUnreachableNamesTheCauseAndTheFix(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ferry.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o600)
	dial := func(errno error) error {
		return &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)}
	}
	for _, c := range []struct {
		name string
		err  error
		says []string
	}{
		{"missing", dial(syscall.ENOENT), []string{"its debug socket " + sock + " does not exist", "--socket or FERRY_SOCKET"}},
		{"a file on the path", dial(syscall.ENOTDIR), []string{"does not exist"}},
		{"stale", dial(syscall.ECONNREFUSED), []string{"nothing listens on " + sock, "start ferryd", "ferry pod"}},
		{"permission", dial(syscall.EACCES), []string{"permission denied on its debug socket " + sock, "mode 0600, owner uid", "sudo", "--debug-socket-mode"}},
		{"not a socket", dial(syscall.ENOTSOCK), []string{"cannot reach ferryd at " + sock + ": socket operation on non-socket", "is that path ferryd's debug socket?"}},
		{"cut", io.ErrUnexpectedEOF, []string{"is that path ferryd's debug socket?"}},
		{"hung", context.DeadlineExceeded, []string{"ferryd at " + sock + " did not answer in time", "its log"}},
		{"other", dial(syscall.EINVAL), []string{"cannot reach ferryd at " + sock + ": invalid argument (is it running?"}},
	} {
		un := New(sock).unreachable(c.err)
		if un.Socket != sock || un.Err != c.err {
			t.Errorf("%s: socket %q, cause %v", c.name, un.Socket, un.Err)
		}
		for _, s := range c.says {
			if !strings.Contains(un.Error(), s) {
				t.Errorf("%s: %q does not say %q", c.name, un, s)
			}
		}
	}
}
