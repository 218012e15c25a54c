package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of /proc's CPU times; Linux fixes it at 100 on every
// architecture Go runs on, whatever the kernel's own tick rate.
const userHZ = 100

// treeCPU is the CPU seconds used so far by pid and everything it forked.
// A child is counted either while it is alive or, once reaped, in its
// parent's cutime/cstime, never both.
func treeCPU(pid int) (float64, error) {
	st, err := procStat(pid)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	ticks := st.ticks
	for _, d := range descendants(pid) {
		if s, err := procStat(d); err == nil {
			ticks += s.ticks
		}
	}
	return float64(ticks) / userHZ, nil
}

// hostCPU is the busy CPU seconds of the whole machine so far: writer,
// sink, relays and the kernel's network work, and anything else running.
func hostCPU() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected format")
	}
	var ticks int64
	// user nice system idle iowait irq softirq: all but idle and iowait;
	// steal is the hypervisor's, not this machine's work.
	for i, v := range f[1:8] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return float64(ticks) / userHZ, nil
}
