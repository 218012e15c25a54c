package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc's CPU times: fixed at 100 in the kernel's
// ABI whatever the kernel's own tick rate.
const userHZ = 100

// procSample is what the kernel says of one process at one moment: read
// from /proc, not from ferryd's own /metrics, so the figures do not rest
// on what the process measured of itself.
type procSample struct {
	At time.Time
	// Ticks is utime+stime of every thread, in userHZ.
	Ticks   uint64
	RSSKiB  uint64
	Threads int
	FDs     int
}

func readProc(pid int) (procSample, error) {
	s := procSample{At: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.Ticks, err = statTicks(string(stat)); err != nil {
		return s, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	if s.RSSKiB, s.Threads, err = statusFigures(string(status)); err != nil {
		return s, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.FDs = len(fds)
	return s, nil
}

// statTicks is utime+stime from a /proc/PID/stat line. The command name
// may hold spaces and parentheses: the fields are counted from the last ")".
func statTicks(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	// After ")": state(3) ppid ... utime(14) stime(15), so utime is the
	// 12th field here.
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want 13 or more", len(f))
	}
	var sum uint64
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// statusFigures reads VmRSS (kB) and Threads from /proc/PID/status.
func statusFigures(status string) (rssKiB uint64, threads int, err error) {
	var haveRSS, haveThreads bool
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			if rssKiB, err = strconv.ParseUint(f[0], 10, 64); err != nil {
				return 0, 0, fmt.Errorf("VmRSS: %w", err)
			}
			haveRSS = true
		case "Threads":
			if threads, err = strconv.Atoi(f[0]); err != nil {
				return 0, 0, fmt.Errorf("Threads: %w", err)
			}
			haveThreads = true
		}
	}
	if !haveRSS || !haveThreads {
		return 0, 0, fmt.Errorf("no VmRSS or Threads line (a zombie?)")
	}
	return rssKiB, threads, nil
}

// cpuPercentCore is the CPU a process used between two samples, as a
// percentage of one core.
func cpuPercentCore(a, b procSample) float64 {
	secs := b.At.Sub(a.At).Seconds()
	if secs <= 0 || b.Ticks < a.Ticks {
		return 0
	}
	return float64(b.Ticks-a.Ticks) / userHZ / secs * 100
}

// hostSample is the whole machine at one moment: whether it, and not
// ferryd, is what limits the launcher count.
type hostSample struct {
	At time.Time
	// Busy and Total are jiffies of every CPU, from /proc/stat's first
	// line; idle and iowait are what is not busy.
	Busy, Total     uint64
	MemAvailableKiB uint64
}

func readHost() (hostSample, error) {
	h := hostSample{At: time.Now()}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return h, err
	}
	if h.Busy, h.Total, err = cpuJiffies(string(stat)); err != nil {
		return h, fmt.Errorf("/proc/stat: %w", err)
	}
	mem, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return h, err
	}
	if h.MemAvailableKiB, err = meminfoKiB(string(mem), "MemAvailable"); err != nil {
		return h, fmt.Errorf("/proc/meminfo: %w", err)
	}
	return h, nil
}

func cpuJiffies(stat string) (busy, total uint64, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("first line %q is not the cpu total", line)
	}
	// user nice system idle iowait irq softirq steal (guest and
	// guest_nice are already in user and nice).
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total, nil
}

// meminfoKiB is one line of /proc/meminfo, in KiB.
func meminfoKiB(meminfo, key string) (uint64, error) {
	for _, line := range strings.Split(meminfo, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseUint(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s line", key)
}

// busyPercent is the share of all the machine's CPUs busy between two
// samples (100 is every core busy).
func busyPercent(a, b hostSample) float64 {
	if b.Total <= a.Total || b.Busy < a.Busy {
		return 0
	}
	return float64(b.Busy-a.Busy) / float64(b.Total-a.Total) * 100
}
