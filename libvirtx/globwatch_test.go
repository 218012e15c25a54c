package libvirtx

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

func TestWatchLevels(t *testing.T) {
	got := watchLevels("/k/pods/*/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock")
	want := []string{"/k/pods", "/k/pods/*", "/k/pods/*/volumes", "/k/pods/*/volumes/kubernetes.io~empty-dir",
		"/k/pods/*/volumes/kubernetes.io~empty-dir/libvirt-runtime"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("levels %q, want %q", got, want)
	}
	if got := watchLevels("/run/launchers/*.sock"); !reflect.DeepEqual(got, []string{"/run/launchers"}) {
		t.Errorf("levels %q", got)
	}
}

// A virt-launcher pod appears under the kubelet's root (its directories,
// then libvirt's socket): the pool serves it at once, though its periodic
// scan would not come for an hour.
func TestPoolFindsANewLauncherSocketAtOnce(t *testing.T) {
	// Not t.TempDir(): a unix socket's path must fit in 108 bytes.
	root, err := os.MkdirTemp("", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.MkdirAll(filepath.Join(root, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	glob := KubeVirtSocketGlob(filepath.Join(root, "pods"))
	p, h, _ := runPool(t, PoolConfig{Glob: glob, RescanEvery: time.Hour, CallTimeout: time.Second, GlobEmptyAfter: 100 * time.Millisecond})
	waitFor := func(what string, f func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !f(); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("glob reported empty", func() bool {
		g, ok := p.GlobStatus()
		return ok && g.Empty && g.Matches == 0 && g.Inotify
	})

	for i, pod := range []string{"pod-1", "pod-2"} {
		// The kubelet makes a pod's directories one by one, and libvirt
		// its socket a moment later.
		dir := filepath.Join(root, "pods")
		for _, elem := range []string{pod, "volumes", "kubernetes.io~empty-dir", "libvirt-runtime"} {
			dir = filepath.Join(dir, elem)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		began := time.Now()
		f := libvirtxtest.New(t, filepath.Join(dir, "virtqemud-sock"))
		h.waitServed(t, f.Path())
		t.Logf("launcher %d served %v after its socket appeared", i+1, time.Since(began).Round(time.Millisecond))
		if g, _ := p.GlobStatus(); g.Matches != i+1 || g.Empty {
			t.Errorf("glob status %+v, want %d matches", g, i+1)
		}
	}
}

// A storm of inotify events makes one scan per kickSettle, not one each.
func TestKicksAreSettled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kick := make(chan struct{}, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case kick <- struct{}{}:
			default:
			}
			time.Sleep(time.Millisecond)
		}
	}()
	began := time.Now()
	scans := 0
	for time.Since(began) < 5*kickSettle/2 {
		if !nextScan(ctx, nil, kick) {
			t.Fatal("ended without its context ending")
		}
		scans++
	}
	if scans > 3 {
		t.Errorf("%d scans in %v of constant events, want at most 3", scans, time.Since(began))
	}
	if d := time.Since(began); scans > 0 && d/time.Duration(scans) < kickSettle {
		t.Errorf("%d scans in %v: less than %v apart", scans, d, kickSettle)
	}
	cancel()
	if nextScan(ctx, nil, kick) {
		t.Error("went on after its context ended")
	}
}
