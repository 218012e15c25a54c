// Package testenv lets a test say what it needs of the machine: a tool, or
// root. Where it is missing the test is skipped, saying which, so that a
// contributor's quick check runs as an ordinary user on a bare machine;
// under make test, which installs everything and runs as root
// (FERRY_REQUIRE_ALL set), a missing need fails the test instead: a
// security test must never be skipped unseen.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireAll is the variable make test sets.
const RequireAll = "FERRY_REQUIRE_ALL"

// missing skips t, or fails it where everything is required.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequireAll) != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// Tool is the path of the command name; without it t is skipped (or
// failed, see package doc), saying how to get it.
func Tool(t testing.TB, name, how string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, "needs %s, which is not installed (%s)", name, how)
	}
	return p
}

// File skips (or fails) t unless path exists, saying what provides it.
func File(t testing.TB, path, how string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		missing(t, "needs %s (%s): %v", path, how, err)
	}
}

// Root skips (or fails) t unless it runs as root, saying why it must.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "needs root to %s (make test runs as root)", why)
	}
}
