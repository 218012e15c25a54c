package libvirtx

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// A launcher pod's end (its daemon gone, then its socket) is no fault: the
// pool warns of nothing, and says at Info that the socket went.
func TestAPodsEndIsNoWarning(t *testing.T) {
	dir := t.TempDir()
	s := libvirtxtest.New(t, filepath.Join(dir, "virtqemud-sock"))
	core, logs := observer.New(zapcore.InfoLevel)
	h := newRecordingHandler()
	p := NewPool(PoolConfig{Glob: filepath.Join(dir, "*-sock"), RescanEvery: 50 * time.Millisecond, CallTimeout: time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond}, h, zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	h.waitServed(t, s.Path())
	if err := os.Remove(s.Path()); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	waitUntil(t, "the socket no longer watched", 5*time.Second, func() bool {
		return logs.FilterMessage("libvirt socket gone, no longer watched").Len() > 0
	})
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		t.Errorf("warned of a pod's end: %s %v", e.Message, e.ContextMap())
	}
	for _, e := range logs.FilterMessage("libvirt connection ended with its socket (a launcher pod's end)").All() {
		if e.ContextMap()["error"] == "context canceled" {
			t.Errorf("the connection's end was said as %q, not the connection's own", e.ContextMap()["error"])
		}
	}
}
