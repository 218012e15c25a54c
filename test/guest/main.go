// Command guest is the /init of the test bed's guest initramfs. It owns a
// block of memory and keeps rewriting it at a fixed rate so that live
// migrations have a realistic, controllable dirty rate to converge against.
//
// Kernel command line: dirty.mb=N (MiB to own), dirty.rate=R (MiB/s;
// 0 = as fast as the vCPU allows, -1 = touch once then idle),
// dirty.verify=1 (check every page once a second: see verify.go),
// dirty.fill=stamp|zero|random (what a write puts in a page: see fill).
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
	c, err := parseCmdline(string(cmdline))
	if err != nil {
		hang(out, "%v", err)
	}
	d, err := newDirtier(c.mb, c.verify, c.fill)
	if err != nil {
		hang(out, "%v", err)
	}
	start := time.Now()
	d.touchAll()
	fmt.Fprintf(out, "DIRTIER: touched %d MiB in %.2fs (%s pages), target %s READY\n", c.mb, time.Since(start).Seconds(), c.fill, describeRate(c.rate))
	d.run(out, c.rate)
}

// config is what the kernel command line asks of the dirtier.
type config struct {
	mb, rate int
	verify   bool
	fill     fill
}

// parseCmdline reads the dirty.* keys; absent keys mean "own nothing, stay
// idle, check nothing, stamp pages".
func parseCmdline(cmdline string) (config, error) {
	c := config{rate: -1, fill: fillStamp}
	var err error
	for _, field := range strings.Fields(cmdline) {
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			continue
		}
		switch key {
		case "dirty.mb":
			if c.mb, err = strconv.Atoi(val); err != nil || c.mb < 0 {
				return config{}, fmt.Errorf("bad dirty.mb=%q", val)
			}
		case "dirty.rate":
			if c.rate, err = strconv.Atoi(val); err != nil || c.rate < -1 {
				return config{}, fmt.Errorf("bad dirty.rate=%q", val)
			}
		case "dirty.verify":
			c.verify = val == "1"
		case "dirty.fill":
			if c.fill = fill(val); c.fill != fillStamp && c.fill != fillZero && c.fill != fillRandom {
				return config{}, fmt.Errorf("bad dirty.fill=%q (stamp, zero or random)", val)
			}
		}
	}
	if c.verify && c.fill != fillStamp {
		return config{}, fmt.Errorf("dirty.verify=1 needs dirty.fill=stamp, not %s", c.fill)
	}
	return c, nil
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
