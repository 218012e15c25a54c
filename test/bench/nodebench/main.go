// Command nodebench measures what a node full of KubeVirt virt-launcher
// pods costs ferryd. On the test bed it restarts node a's ferryd to watch
// KubeVirt's launcher sockets under the kubelet's pods directory, as the
// DaemonSet's ferryd does, starts launchers there (a session libvirt
// daemon as 107 and an idle guest each) up to each count asked, and once
// ferryd lists them all reads ferryd over a window: its CPU, memory,
// descriptors and threads from the kernel, its goroutines and its calls to
// libvirt from its own /metrics. At each count it also times how soon
// ferryd has a new launcher up, and a scrape of /metrics. The figures
// are read against the count with no launcher of the same run, and a
// line through the counts says what a node of 110 or 250 would cost.
// Run it on a bed that is up with ferryd; test/bench/node.sh brings one up.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/test/testbed"
)

// node is where the launchers and the ferryd measured run.
const node = "a"

// An idle guest: the bed's smallest that boots (its GuestSpec takes 128
// MiB and up), owning no memory to rewrite and rewriting none: a node's
// VMs mostly sit idle, and a busy guest would only cost the machine CPU
// that ferryd then competes for.
var idleGuest = guestSpec{DirtyMiB: 0, DirtyRateMiBs: -1}

func main() { testbed.Main("nodebench", run) }

func run(ctx context.Context, args []string) (err error) {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	var bedLog io.Writer = io.Discard
	if o.verbose {
		bedLog = os.Stderr
	}
	b, err := testbed.Open(testbed.Config{Log: bedLog})
	if err != nil {
		return err
	}
	if b.FerrydPID(node) == 0 {
		return fmt.Errorf("no ferryd runs on node %s: bring the bed up with ferryd (testbed up --ferryd bin/ferryd)", node)
	}
	if left, err := leftovers(b, node); err != nil || len(left) > 0 {
		return fmt.Errorf("node %s already has %d launcher sockets (%v): left by an interrupted run? Bring the bed down and up again", node, len(left), err)
	}
	glob := libvirtx.KubeVirtSocketGlob(podsInNode)
	logf("node %s's ferryd restarted to watch %s alone", node, glob)
	if err := b.SetNodeFerrydArgs(ctx, node, "--libvirt-socket-glob", glob); err != nil {
		return err
	}
	defer func() {
		// Node a's ferryd watches its own libvirtd again, as the bed runs it.
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if rerr := b.SetNodeFerrydArgs(rctx, node); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restoring node %s's ferryd: %w", node, rerr))
		}
	}()
	f, err := newFerryd(b, node)
	if err != nil {
		return err
	}
	st, err := settingsOf(b, o, f.pid)
	if err != nil {
		return err
	}
	guest := idleGuest
	guest.MemoryMiB = o.memoryMiB
	// Guest names carry the start time: a domain left by an earlier,
	// interrupted run never collides with this one's.
	stamp := time.Now().Format("150405")
	fl := &fleet{b: b, node: node, stamp: stamp, guest: guest, parallel: o.parallel}
	defer func() {
		if serr := fl.stopAll(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	e := &env{b: b, node: node, f: f, fleet: fl, o: o, stamp: stamp}
	logf("accelerator %s; counts %s; window %v", st.Accel, countsText(o.counts), o.window)

	t0 := time.Now()
	var rs []countResult
	var stopped error
	for i, n := range o.counts {
		logf("count %d of %d: %d launchers (%s in)", i+1, len(o.counts), n, time.Since(t0).Round(time.Second))
		r, err := measureCount(ctx, e, n)
		if err != nil {
			stopped = err
			break
		}
		rs = append(rs, r)
		logf("%d launchers: CPU %.2f %% of a core, RSS %.1f MiB, %d fds, %.0f goroutines, %.1f libvirt calls/s, seen in %s ms, scrape %.1f ms",
			n, r.CPUPercentCore, r.RSSMiB, r.FDs, r.Goroutines, r.CallsPerSecond, opt(r.SeenMedianMs, "%.0f"), r.ScrapeMedianMs)
		// Written as it goes: a bench cut short keeps what it measured.
		if werr := writeJSON(o.jsonOut, st, rs); werr != nil {
			return werr
		}
	}
	took := time.Since(t0).Round(time.Second).String()
	logf("%d of %d counts in %s", len(rs), len(o.counts), took)
	// What was measured is printed even when the bench stopped early.
	report(os.Stdout, st, rs, took)
	if stopped != nil {
		return fmt.Errorf("stopped after %d of %d counts: %w", len(rs), len(o.counts), stopped)
	}
	return nil
}

func settingsOf(b *testbed.Bed, o options, ferrydPID int) (settings, error) {
	st := settings{
		Accel: strings.ToUpper(b.Accel()), MemoryMiB: o.memoryMiB, DirtyMiB: idleGuest.DirtyMiB, DirtyRateMiBs: idleGuest.DirtyRateMiBs,
		Parallel: o.parallel, WindowSeconds: o.window.Seconds(), SettleSeconds: o.settle.Seconds(),
		Probes: o.probes, Scrapes: o.scrapes, HostCPUs: runtime.NumCPU(), Counts: o.counts,
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ferrydPID))
	if err != nil {
		return st, err
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	st.FerrydGlob = flagValue(args, "libvirt-socket-glob", "(none)")
	st.FerrydSampleInterval = flagValue(args, "sample-interval", "1s (ferryd's default)")
	mem, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return st, err
	}
	total, err := meminfoKiB(string(mem), "MemTotal")
	if err != nil {
		return st, err
	}
	st.HostMemGiB = float64(total) / (1 << 20)
	return st, nil
}

// flagValue is the last value given to --name in args, as "--name v" or
// "--name=v" (single dash too, as Go's flag package takes), else def.
func flagValue(args []string, name, def string) string {
	v := def
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name && i+1 < len(args) {
			v = args[i+1]
		} else if val, ok := strings.CutPrefix(a, name+"="); ok {
			v = val
		}
	}
	return v
}

// benchFile is what --json writes: the settings, every count's figures
// and what they come to, so the file reads without the report.
type benchFile struct {
	Settings settings      `json:"settings"`
	Counts   []countResult `json:"counts"`
	Summary  summary       `json:"summary"`
}

func writeJSON(path string, st settings, rs []countResult) error {
	if path == "" {
		return nil
	}
	out, err := json.MarshalIndent(benchFile{st, rs, summarize(rs)}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nodebench: "+format+"\n", args...)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
