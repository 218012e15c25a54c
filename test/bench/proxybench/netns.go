package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The bench's own namespaces and veth, apart from the project's test bed
// (ferry-a, ferry-b), which may be in use while the bench runs.
const (
	nsA   = "ferry-bench-a"
	nsB   = "ferry-bench-b"
	vethA = "fba"
	vethB = "fbb"
	ipA   = "10.78.0.1"
	ipB   = "10.78.0.2"
)

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// deleteNamespaces also takes the veth pair with them; it is safe to call
// when they are already gone.
func deleteNamespaces() error {
	var first error
	for _, ns := range []string{nsA, nsB} {
		if netnsExists(ns) {
			if err := ipCmd("netns", "del", ns); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// createNamespaces starts from scratch, so a run that crashed earlier
// leaves nothing that could skew this one.
func createNamespaces() error {
	if err := deleteNamespaces(); err != nil {
		return err
	}
	steps := [][]string{
		{"netns", "add", nsA},
		{"netns", "add", nsB},
		{"link", "add", vethA, "netns", nsA, "type", "veth", "peer", "name", vethB, "netns", nsB},
		{"-n", nsA, "addr", "add", ipA + "/24", "dev", vethA},
		{"-n", nsB, "addr", "add", ipB + "/24", "dev", vethB},
	}
	for _, ns := range [][2]string{{nsA, vethA}, {nsB, vethB}} {
		steps = append(steps,
			[]string{"-n", ns[0], "link", "set", "lo", "up"},
			[]string{"-n", ns[0], "link", "set", ns[1], "up"})
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			deleteNamespaces()
			return err
		}
	}
	return nil
}
