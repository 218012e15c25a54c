package libvirtx

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
)

// QEMUCPU is one cgroup CPU reading of a domain's QEMU process.
type QEMUCPU struct {
	PID              int
	Cgroup           string
	UsageSeconds     float64
	Periods          uint64
	ThrottledPeriods uint64
	ThrottledSeconds float64
	Time             time.Time
}

// QEMUCgroups reads QEMU processes' cgroup CPU figures on this host, for
// cgroup v1 and v2 alike. It finds a domain's QEMU by its "-name guest=NAME"
// argument in /proc, which needs the host PID namespace (hostPID in a
// DaemonSet), and remembers the PID while it stays valid.
type QEMUCgroups struct {
	Proc string // default /proc

	mu   sync.Mutex
	pids map[string]int
}

// ReadCPU returns the CPU figures of the named domain's QEMU process.
func (q *QEMUCgroups) ReadCPU(domain string) (QEMUCPU, error) {
	pid, err := q.pid(domain)
	if err != nil {
		return QEMUCPU{}, err
	}
	r := QEMUCPU{PID: pid, Time: time.Now()}
	if cgroups.Mode() == cgroups.Unified {
		group, err := cgroup2.PidGroupPath(pid)
		if err != nil {
			return r, fmt.Errorf("cgroup of QEMU pid %d: %w", pid, err)
		}
		if group == "/" {
			return r, errRootCgroup(pid)
		}
		group = machineGroup(group)
		m, err := cgroup2.Load(group)
		if err != nil {
			return r, fmt.Errorf("load cgroup %s: %w", group, err)
		}
		st, err := m.Stat()
		if err != nil || st.CPU == nil {
			return r, fmt.Errorf("read cgroup %s: %v", group, err)
		}
		r.Cgroup = group
		r.UsageSeconds = float64(st.CPU.UsageUsec) / 1e6
		r.Periods, r.ThrottledPeriods = st.CPU.NrPeriods, st.CPU.NrThrottled
		r.ThrottledSeconds = float64(st.CPU.ThrottledUsec) / 1e6
		return r, nil
	}
	r.Cgroup = cgroupV1CPUPath(q.proc(), pid)
	if r.Cgroup == "/" || r.Cgroup == "" {
		return r, errRootCgroup(pid)
	}
	cg, err := cgroup1.Load(cgroup1.PidPath(pid), cgroup1.WithHierarchy(cgroup1.Default), func(c *cgroup1.InitConfig) error { c.InitCheck = cgroup1.AllowAny; return nil })
	if err != nil {
		return r, fmt.Errorf("load cgroup of QEMU pid %d: %w", pid, err)
	}
	st, err := cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil || st.CPU == nil {
		return r, fmt.Errorf("read cgroup of QEMU pid %d: %v", pid, err)
	}
	r.Cgroup = machineGroup(r.Cgroup)
	if u := st.CPU.Usage; u != nil {
		r.UsageSeconds = float64(u.Total) / 1e9
	}
	if th := st.CPU.Throttling; th != nil {
		r.Periods, r.ThrottledPeriods = th.Periods, th.ThrottledPeriods
		r.ThrottledSeconds = float64(th.ThrottledTime) / 1e9
	}
	return r, nil
}

func (q *QEMUCgroups) proc() string {
	if q.Proc == "" {
		return "/proc"
	}
	return q.Proc
}

func (q *QEMUCgroups) pid(domain string) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pids == nil {
		q.pids = map[string]int{}
	}
	if pid, ok := q.pids[domain]; ok && isQEMUOf(q.proc(), pid, domain) {
		return pid, nil
	}
	delete(q.pids, domain)
	entries, err := os.ReadDir(q.proc())
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if isQEMUOf(q.proc(), pid, domain) {
			q.pids[domain] = pid
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no QEMU process for domain %q in %s (ferryd needs the host PID namespace)", domain, q.proc())
}

// isQEMUOf matches libvirt's "-name guest=NAME,..." argument; commas in
// domain names are doubled on QEMU's command line.
func isQEMUOf(proc string, pid int, domain string) bool {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := bytes.Split(b, []byte{0})
	want := "guest=" + strings.ReplaceAll(domain, ",", ",,")
	for i := 0; i+1 < len(args); i++ {
		if string(args[i]) == "-name" {
			v := string(args[i+1])
			return v == want || strings.HasPrefix(v, want+",")
		}
	}
	return false
}

func cgroupV1CPUPath(proc string, pid int) string {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ",cpu,") {
			return parts[2]
		}
	}
	return ""
}

// machineGroup: libvirt moves QEMU's main thread into an "emulator" child
// group and vCPU threads into "vcpuN" siblings; their parent holds them all.
func machineGroup(path string) string {
	if parent, ok := strings.CutSuffix(path, "/emulator"); ok && parent != "" {
		return parent
	}
	return path
}

// errRootCgroup: the root cgroup's figures are the whole host's, which would
// pass for QEMU's; say there are none instead.
func errRootCgroup(pid int) error {
	return fmt.Errorf("QEMU pid %d has no cpu cgroup of its own (it runs in the root cgroup); its CPU figures would be the whole host's", pid)
}
