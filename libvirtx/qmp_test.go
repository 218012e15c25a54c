package libvirtx

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// scriptedQMP answers each command line with the next reply lines, as a
// QEMU monitor would (greeting first, events interleaved).
func scriptedQMP(t *testing.T, replies map[string][]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {"version": {"qemu": {"major": 10}}, "capabilities": ["oob"]}}` + "\n"))
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			for cmd, lines := range replies {
				if strings.Contains(sc.Text(), `"execute":"`+cmd+`"`) {
					for _, l := range lines {
						c.Write([]byte(l + "\n"))
					}
				}
			}
		}
	}()
	return path
}

func TestQMPSkipsEventsAndReadsTheState(t *testing.T) {
	path := scriptedQMP(t, map[string][]string{
		"qmp_capabilities": {`{"return": {}}`},
		"query-migrate": {`{"timestamp": {"seconds": 1}, "event": "MIGRATION", "data": {"status": "postcopy-paused"}}`,
			`{"return": {"status": "postcopy-paused", "total-time": 12}}`},
		"migrate-recover": {`{"error": {"class": "GenericError", "desc": "Migrate recover can only be run when postcopy is paused."}}`},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := DialQMP(ctx, path, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := q.MigrationStatus(ctx)
	if err != nil || st != QEMUMigrationPostCopyPaused {
		t.Fatalf("status %q, %v", st, err)
	}
	err = q.MigrateRecover(ctx, "/x.sock")
	var qe *QMPError
	if !errors.As(err, &qe) || !strings.Contains(qe.Desc, "only be run when postcopy is paused") {
		t.Fatalf("refusal lost: %v", err)
	}
}

func TestQMPWithoutAGreetingIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Write([]byte(`{"hello": 1}` + "\n"))
			time.Sleep(time.Second)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := DialQMP(ctx, path, os.Getpid()); err == nil || !strings.Contains(err.Error(), "no QMP greeting") {
		t.Fatalf("got %v", err)
	}
}

// A socket someone else listens on where QEMU's monitor should be is
// refused before a byte is read from it.
func TestQMPOfAnotherProcessIsRefused(t *testing.T) {
	path := scriptedQMP(t, map[string][]string{"qmp_capabilities": {`{"return": {}}`}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := DialQMP(ctx, path, os.Getpid()+1); err == nil || !strings.Contains(err.Error(), "not the guest's QEMU") {
		t.Fatalf("got %v", err)
	}
}
