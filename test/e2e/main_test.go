//go:build e2e

// Package e2e runs Ferry against real libvirt daemons and real QEMU guests:
// two nodes in network namespaces, real live migrations, real failures.
// Tests run serially and share one test bed.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

var (
	bed         *testbed.Bed
	prom        *testbed.Prometheus
	ferryctlBin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: the end-to-end suite needs root (network namespaces, libvirtd)")
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := os.MkdirTemp("", "ferry-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(bin)
	root, err := testbed.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	for _, c := range []string{"ferryd", "ferryctl"} {
		// ferry_faults: the tests' ferryd can inject the faults FERRY_FAULTS
		// names; no other build can.
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", "ferry_faults", "-o", filepath.Join(bin, c), "./cmd/"+c)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: building %s: %v\n", c, err)
			return 1
		}
	}
	ferryctlBin = filepath.Join(bin, "ferryctl")
	cfg := testbed.Config{FerrydBin: filepath.Join(bin, "ferryd"), Log: os.Stderr}
	t0 := time.Now()
	if err := testbed.Prepare(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: prepare:", err)
		return 1
	}
	bed, err = testbed.Up(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: up:", err)
		return 1
	}
	rules, err := bedRules()
	if err == nil {
		prom, err = bed.StartPrometheus(ctx, testbed.PrometheusConfig{Rules: rules})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: prometheus:", err)
		_ = bed.Down()
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: test bed up in %.1fs, guests run under %s\n", time.Since(t0).Seconds(), accelName(bed.Accel()))
	code := m.Run()
	if code != 0 {
		dumpLogs()
	}
	if err := writeSupport(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	stopKube()
	if err := bed.Down(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: down:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func accelName(a string) string {
	if a == "kvm" {
		return "KVM"
	}
	return "TCG emulation (no usable hardware virtualization on this host)"
}

// dumpLogs prints the tail of each node's ferryd log to explain a failure.
func dumpLogs() {
	for _, n := range []string{"a", "b"} {
		b, err := os.ReadFile(filepath.Join(bed.Node(n).Dir, "ferryd.log"))
		if err != nil {
			continue
		}
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		fmt.Fprintf(os.Stderr, "--- ferryd log, node %s (tail) ---\n%s\n", n, b)
	}
}
