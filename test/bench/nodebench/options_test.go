package main

import (
	"slices"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	o, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.counts, []int{0, 10, 20, 40}) || o.window != 30*time.Second || o.settle != 10*time.Second ||
		o.probes != 3 || o.scrapes != 20 || o.parallel != 4 || o.memoryMiB != 128 {
		t.Errorf("defaults %+v", o)
	}
}

func TestCountsAscend(t *testing.T) {
	if c, err := parseCounts(" 0, 5 ,12"); err != nil || !slices.Equal(c, []int{0, 5, 12}) {
		t.Errorf("%v (%v)", c, err)
	}
	for _, bad := range []string{"", "0,,5", "5,0", "0,5,5", "-1", "x"} {
		if c, err := parseCounts(bad); err == nil {
			t.Errorf("%q read as %v", bad, c)
		}
	}
}

func TestOptionsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "500ms"}, {"--settle", "-1s"}, {"--probes", "-1"}, {"--scrapes", "0"},
		{"--parallel", "0"}, {"--memory-mib", "64"}, {"--launchers", "10,0"}, {"extra"},
	} {
		if _, err := parseOptions(args); err == nil {
			t.Errorf("%v taken", args)
		}
	}
}

func TestFlagValueFromACommandLine(t *testing.T) {
	args := []string{"/bin/ferryd", "--node-name", "a", "--sample-interval", "1s", "--libvirt-socket-glob=/p/*/s", "-sample-interval=2s"}
	if got := flagValue(args, "sample-interval", "def"); got != "2s" {
		t.Errorf("sample-interval %q, want the last one given, 2s", got)
	}
	if got := flagValue(args, "libvirt-socket-glob", "def"); got != "/p/*/s" {
		t.Errorf("glob %q", got)
	}
	if got := flagValue(args, "metrics-addr", "def"); got != "def" {
		t.Errorf("absent flag %q, want the default", got)
	}
}
