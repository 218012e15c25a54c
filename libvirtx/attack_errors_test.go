package libvirtx

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// A pod's libvirt refuses ferryd with an error of 4 MiB, up to libvirt's
// own limit: ferryd kept it whole per socket, and /readyz, on a port every
// pod reaches, built its body from all of them. What is kept is clipped.
func TestAttackAPodsLibvirtErrorIsClippedWhereKept(t *testing.T) {
	dir := t.TempDir()
	f := libvirtxtest.New(t, filepath.Join(dir, "launcher.sock"))
	huge := strings.Repeat("\x1b[31mno\n", (4<<20)/9)
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == 1 { // connect open
			return nil, &libvirt.Error{Code: 1, Message: huge}, true
		}
		return nil, nil, false
	})
	h := &recordingHandler{served: make(chan string, 4), lost: make(chan lostCall, 4)}
	p := NewPool(PoolConfig{Glob: filepath.Join(dir, "*.sock"), CallTimeout: time.Second}, h, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		p.wg.Wait()
	}()
	p.rescan(ctx)
	var kept string
	for deadline := time.Now().Add(10 * time.Second); kept == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range p.Status() {
			kept = s.LastError
		}
	}
	if kept == "" {
		t.Fatal("no error kept for the socket")
	}
	if len(kept) > maxKeptError+len("…") || strings.ContainsAny(kept, "\x1b\n") {
		t.Fatalf("kept %d bytes of the pod's error (control characters: %v)", len(kept), strings.ContainsAny(kept, "\x1b\n"))
	}
}
