package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/test/testbed"
)

// The kubelet's pods directory as the node (and ferryd) sees it, where
// the bed lays its launchers out: ferryd is told to watch KubeVirt's glob
// there, as the DaemonSet's ferryd finds it by default.
const podsInNode = "/var/lib/kubelet/pods"

// namespace is the launchers' VMIs', so their domains are easy to tell
// from anything else a bed holds.
const namespace = "nodebench"

// fleet is the launchers the bench runs on one node. Every launcher
// started is recorded at once, so that stopAll, on any exit, leaves none
// in the node's glob for whatever runs on the bed next.
type fleet struct {
	b        *testbed.Bed
	node     string
	stamp    string
	guest    guestSpec
	parallel int

	mu sync.Mutex
	ls []*testbed.Launcher
	// retried counts launchers that started only at a second attempt.
	retried int
}

// guestSpec is every fleet launcher's guest: the smallest the bed boots,
// idle (DirtyRateMiBs -1 sleeps; DirtyMiB 0 owns no memory to rewrite).
type guestSpec struct {
	MemoryMiB, DirtyMiB, DirtyRateMiBs int
}

func (f *fleet) launchers() []*testbed.Launcher {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*testbed.Launcher(nil), f.ls...)
}

func (f *fleet) retries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.retried
}

// hostPodsDir is the node's kubelet pods directory from the root
// namespace, where the bench watches for a socket to appear.
func hostPodsDir(b *testbed.Bed, node string) string {
	return filepath.Join(b.Node(node).Dir, "kubelet", "pods")
}

// leftovers are launcher sockets already in the node's glob: from an
// interrupted run on a bed left up, they would count in every figure.
func leftovers(b *testbed.Bed, node string) ([]string, error) {
	return filepath.Glob(libvirtx.KubeVirtSocketGlob(hostPodsDir(b, node)))
}

// grow starts launchers until the fleet holds to, parallel at a time:
// booting a TCG guest is seconds of CPU, most of the bench's time.
func (f *fleet) grow(ctx context.Context, to int) error {
	have := len(f.launchers())
	if to <= have {
		return nil
	}
	t0 := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, f.parallel)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	// Names go on from the last: a launcher's domain must not take the
	// name of one stopped earlier in the run.
	for i := have + 1; i <= to; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			spec := testbed.LauncherSpec{
				Node: f.node, Namespace: namespace, Name: fmt.Sprintf("g%s-%03d", f.stamp, i), VMIUID: uuid.NewString(),
				MemoryMiB: f.guest.MemoryMiB, DirtyMiB: f.guest.DirtyMiB, DirtyRateMiBs: f.guest.DirtyRateMiBs,
			}
			l, err := f.b.StartLauncher(ctx, spec)
			if err != nil && ctx.Err() == nil {
				// On a machine its guests keep busy, the bed's first dial
				// of a new daemon now and then finds its socket there but
				// not yet accepting ("connection refused"). The bed has
				// stopped that launcher; one failure must not end a bench
				// that took minutes to get here.
				logf("launcher %s_%s did not start, starting it again: %v", spec.Namespace, spec.Name, err)
				f.mu.Lock()
				f.retried++
				f.mu.Unlock()
				l, err = f.b.StartLauncher(ctx, spec)
			}
			if err != nil {
				once.Do(func() { first = err; cancel() })
				return
			}
			f.mu.Lock()
			f.ls = append(f.ls, l)
			n := len(f.ls)
			f.mu.Unlock()
			logf("launcher %d/%d up, %.0f s", n, to, time.Since(t0).Seconds())
		}()
	}
	wg.Wait()
	if first != nil && !errors.Is(first, context.Canceled) {
		return fmt.Errorf("starting launchers (%d of %d up): %w", len(f.launchers()), to, first)
	}
	return context.Cause(ctx)
}

// stopAll stops every launcher, a few at a time, and says which failed.
func (f *fleet) stopAll() error {
	ls := f.launchers()
	if len(ls) == 0 {
		return nil
	}
	t0 := time.Now()
	errs := make([]error, len(ls))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, l := range ls {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = l.Stop()
		}()
	}
	wg.Wait()
	f.mu.Lock()
	f.ls = nil
	f.mu.Unlock()
	logf("stopped %d launchers in %.0f s", len(ls), time.Since(t0).Seconds())
	return errors.Join(errs...)
}

// socketAppeared polls for a file at path every 5 ms and says when it
// first was a socket; it gives up when ctx ends.
func socketAppeared(ctx context.Context, path string) (time.Time, error) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no socket at %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
