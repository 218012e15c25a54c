package main

import (
	"os"
	"testing"
	"time"
)

func TestStatTicksPastACommandWithSpacesAndParentheses(t *testing.T) {
	// Fields after the name: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime=250 stime=50 cutime=7 cstime=3.
	stat := "1234 (fer ry) d) S 1 1234 1234 0 -1 4194560 900 0 0 0 250 50 7 3 20 0 12 0 100 0 0\n"
	n, err := statTicks(stat)
	if err != nil || n != 300 {
		t.Errorf("ticks %d (%v), want utime+stime 300, not the reaped children's", n, err)
	}
	if _, err := statTicks("1234 no name here"); err == nil {
		t.Error("a line without a command name was read")
	}
	if _, err := statTicks("1234 (x) S 1 2"); err == nil {
		t.Error("a short line was read")
	}
}

func TestStatusFigures(t *testing.T) {
	status := "Name:\tferryd\nVmPeak:\t  900000 kB\nVmRSS:\t   41236 kB\nThreads:\t12\nSigQ:\t0/1\n"
	rss, threads, err := statusFigures(status)
	if err != nil || rss != 41236 || threads != 12 {
		t.Errorf("rss %d, threads %d (%v); want 41236 and 12", rss, threads, err)
	}
	if _, _, err := statusFigures("Name:\tzombie\nThreads:\t1\n"); err == nil {
		t.Error("a status without VmRSS was read")
	}
}

func TestCPUPercentOfACore(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := procSample{At: t0, Ticks: 1000}
	b := procSample{At: t0.Add(30 * time.Second), Ticks: 1045}
	// 45 ticks = 0.45 s of CPU in 30 s: 1.5 % of one core.
	if got := cpuPercentCore(a, b); !near(got, 1.5) {
		t.Errorf("%v %%, want 1.5", got)
	}
	if got := cpuPercentCore(b, b); got != 0 {
		t.Errorf("no time: %v, want 0", got)
	}
}

func TestHostFigures(t *testing.T) {
	stat0 := "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n"
	stat1 := "cpu  200 0 150 750 100 0 50 0 0 0\ncpu0 1 2 3\n"
	b0, t0, err := cpuJiffies(stat0)
	if err != nil {
		t.Fatal(err)
	}
	b1, t1, err := cpuJiffies(stat1)
	if err != nil {
		t.Fatal(err)
	}
	// 200 busy of 250 jiffies: idle went up 50, iowait not at all.
	if got := busyPercent(hostSample{Busy: b0, Total: t0}, hostSample{Busy: b1, Total: t1}); !near(got, 80) {
		t.Errorf("busy %v %%, want 80", got)
	}
	mem := "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n"
	if kib, err := meminfoKiB(mem, "MemAvailable"); err != nil || kib != 20000000 {
		t.Errorf("MemAvailable %d (%v)", kib, err)
	}
	if _, err := meminfoKiB(mem, "Nope"); err == nil {
		t.Error("a missing line was read")
	}
}

// The bench reads the kernel about its own process as it reads ferryd.
func TestReadProcOfThisProcess(t *testing.T) {
	s, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSKiB == 0 || s.Threads < 1 || s.FDs < 3 {
		t.Errorf("%+v: want some memory, a thread, stdin/out/err", s)
	}
	if _, err := readHost(); err != nil {
		t.Error(err)
	}
}
