// Command guest is the /init of the test bed's guest initramfs. It owns a
// block of memory and keeps rewriting it at a fixed rate so that live
// migrations have a realistic, controllable dirty rate to converge against.
//
// Kernel command line: dirty.mb=N (MiB to own), dirty.rate=R (MiB/s;
// 0 = as fast as the vCPU allows, -1 = touch once then idle),
// dirty.verify=1 (check every page once a second: see verify.go).
// Everything is reported on /dev/ttyS0, which libvirt records in a file.
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	// PID 1 gets an empty filesystem; without these there is no cmdline and no serial device node.
	_ = os.MkdirAll("/proc", 0o755)
	_ = os.MkdirAll("/dev", 0o755)
	_ = syscall.Mount("proc", "/proc", "proc", 0, "")
	_ = syscall.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")

	var out io.Writer = os.Stdout
	if tty, err := os.OpenFile("/dev/ttyS0", os.O_WRONLY, 0); err == nil {
		out = tty
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		hang(out, "read /proc/cmdline: %v", err)
	}
	mb, rate, verify, err := parseCmdline(string(cmdline))
	if err != nil {
		hang(out, "%v", err)
	}
	d, err := newDirtier(mb, verify)
	if err != nil {
		hang(out, "%v", err)
	}
	start := time.Now()
	d.touchAll()
	fmt.Fprintf(out, "DIRTIER: touched %d MiB in %.2fs, target %s READY\n", mb, time.Since(start).Seconds(), describeRate(rate))
	d.run(out, rate)
}

// parseCmdline returns dirty.mb, dirty.rate and dirty.verify; absent keys
// mean "own nothing, stay idle, check nothing".
func parseCmdline(cmdline string) (mb, rate int, verify bool, err error) {
	rate = -1
	for _, field := range strings.Fields(cmdline) {
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			continue
		}
		switch key {
		case "dirty.mb":
			if mb, err = strconv.Atoi(val); err != nil || mb < 0 {
				return 0, 0, false, fmt.Errorf("bad dirty.mb=%q", val)
			}
		case "dirty.rate":
			if rate, err = strconv.Atoi(val); err != nil || rate < -1 {
				return 0, 0, false, fmt.Errorf("bad dirty.rate=%q", val)
			}
		case "dirty.verify":
			verify = val == "1"
		}
	}
	return mb, rate, verify, nil
}

func describeRate(rate int) string {
	switch {
	case rate == 0:
		return "max MiB/s"
	case rate < 0:
		return "idle"
	}
	return fmt.Sprintf("%d MiB/s", rate)
}

// hang reports a fatal problem and never returns: PID 1 exiting panics the
// kernel, which would destroy the domain together with the message.
func hang(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "DIRTIER: FATAL "+format+"\n", args...)
	for {
		time.Sleep(time.Hour)
	}
}
