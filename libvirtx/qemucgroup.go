package libvirtx

import (
	"bytes"
	"errors"
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
	PID          int
	Cgroup       string
	UsageSeconds float64
	// Throttling holds the CFS bandwidth counters of the domain's group
	// and of its emulator group (see readThrottling). A quota throttles
	// only the group it is set on and counts there alone: libvirt's
	// global_quota on the domain's group, emulator_quota on emulator; a
	// parent's cpu.stat does not count its children's throttling.
	Throttling []CgroupThrottling
	Time       time.Time
}

// CgroupThrottling is one cgroup's cumulative CFS bandwidth counters.
type CgroupThrottling struct {
	Cgroup           string
	Periods          uint64
	ThrottledPeriods uint64
	ThrottledSeconds float64
}

// QEMUCgroups reads QEMU processes' cgroup CPU figures on this host, for
// cgroup v1 and v2 alike. It finds a domain's QEMU from libvirt's pid file
// (QEMUPID), which needs the host PID namespace (hostPID in a DaemonSet).
// The cgroup found is kept while libvirt names the same QEMU, so a sample
// reads the pid file's lock and the CPU controller's files and nothing else.
type QEMUCgroups struct {
	Proc string // default /proc

	mu     sync.Mutex
	groups map[groupKey]*cpuGroup
	swept  time.Time // when exited QEMUs' groups were last dropped
}

// Bounds on the groups kept: a pod can list any number of domain names,
// and pid files for them all, but keeps its own share only.
const (
	maxGroupsPerSocket = 64
	maxGroups          = 4096
	sweepEvery         = 10 * time.Second
)

// groupKey: two launchers may run domains of one name.
type groupKey struct{ socket, domain string }

// cpuGroup is a QEMU process and the cgroup that holds all its threads.
type cpuGroup struct {
	pid int
	// where is the process's /proc cgroup file when the group was found.
	where []byte
	used  time.Time // last read
	path  string
	// dir is path in the mounted CPU controller, where cpu.stat is.
	dir string
	v1  cgroup1.Cgroup
	v2  *cgroup2.Manager
	// procUsage: libvirt left QEMU in the root cpuacct group (as it does
	// where it manages only some v1 controllers), whose usage is the whole
	// host's; QEMU's own is then its process CPU time from /proc.
	procUsage bool
}

// ReadCPU returns the CPU figures of the QEMU process that the libvirt
// daemon behind socket runs for domain.
func (q *QEMUCgroups) ReadCPU(socket, domain string) (QEMUCPU, error) {
	g, err := q.group(socket, domain)
	if err != nil {
		return QEMUCPU{}, err
	}
	r := QEMUCPU{PID: g.pid, Cgroup: g.path, Time: time.Now()}
	if g.v2 != nil {
		st, err := g.v2.StatFiltered(cgroup2.StatCPU)
		if err != nil || st.CPU == nil {
			return r, fmt.Errorf("read cgroup %s: %v", g.path, err)
		}
		r.UsageSeconds = float64(st.CPU.UsageUsec) / 1e6
		r.Throttling = readThrottling(g.path, g.dir)
		return r, nil
	}
	st, err := g.v1.Stat(cgroup1.IgnoreNotExist)
	if err != nil || st.CPU == nil {
		return r, fmt.Errorf("read cgroup %s of QEMU pid %d: %v", g.path, g.pid, err)
	}
	switch {
	case g.procUsage:
		secs, err := processCPUSeconds(filepath.Join(q.proc(), strconv.Itoa(g.pid), "stat"))
		if err != nil {
			return r, err
		}
		r.UsageSeconds = secs
	case st.CPU.Usage != nil:
		r.UsageSeconds = float64(st.CPU.Usage.Total) / 1e9
	}
	if g.dir != "" {
		r.Throttling = readThrottling(g.path, g.dir)
	}
	return r, nil
}

// readThrottling reads the CFS bandwidth counters of the domain's group
// at dir (cgroup path path) and of its emulator group, where libvirt puts
// QEMU's main loop and its migration thread: the two whose quotas can
// starve a migration (global_quota, emulator_quota). A vcpuN group's quota
// only slows the guest, and with it its dirtying, so it is not read; nor
// is anything deeper, which libvirt does not create. A group whose
// cpu.stat has no counters (v2 without the cpu controller there) or
// cannot be read is left out: the usage figures stand without it.
func readThrottling(path, dir string) []CgroupThrottling {
	var out []CgroupThrottling
	for _, sub := range []string{"", "emulator"} {
		b, err := os.ReadFile(filepath.Join(dir, sub, "cpu.stat"))
		if err != nil {
			continue
		}
		t, err := parseCPUStat(b)
		if err != nil {
			continue
		}
		t.Cgroup = filepath.Join(path, sub)
		out = append(out, t)
	}
	return out
}

// parseCPUStat reads the CFS bandwidth counters of a cpu.stat file, v1
// (throttled_time in ns) or v2 (throttled_usec).
func parseCPUStat(b []byte) (CgroupThrottling, error) {
	var t CgroupThrottling
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		var dst *uint64
		var ns uint64
		scale := 0.0
		switch k {
		case "nr_periods":
			dst = &t.Periods
		case "nr_throttled":
			dst = &t.ThrottledPeriods
		case "throttled_time":
			dst, scale = &ns, 1e9
		case "throttled_usec":
			dst, scale = &ns, 1e6
		default:
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return t, fmt.Errorf("bad %s value %q", k, v)
		}
		*dst = n
		if scale != 0 {
			t.ThrottledSeconds = float64(ns) / scale
		}
		seen++
	}
	if seen < 3 {
		return t, errors.New("no nr_periods, nr_throttled and throttled time")
	}
	return t, nil
}

func (q *QEMUCgroups) proc() string {
	if q.Proc == "" {
		return "/proc"
	}
	return q.Proc
}

// group returns the domain's QEMU cgroup, found again only when libvirt
// names another QEMU for it.
func (q *QEMUCgroups) group(socket, domain string) (*cpuGroup, error) {
	pid, err := QEMUPID(socket, domain)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.groups == nil {
		q.groups = map[groupKey]*cpuGroup{}
	}
	key := groupKey{socket, domain}
	if err != nil {
		delete(q.groups, key)
		return nil, err
	}
	// libvirt moves QEMU into its cgroup only after the pid file is
	// locked: a group found in between is the daemon's, so the process's
	// cgroup file (one small read) says whether the group still holds.
	where, _ := os.ReadFile(filepath.Join(q.proc(), strconv.Itoa(pid), "cgroup"))
	if g, ok := q.groups[key]; ok && g.pid == pid && bytes.Equal(g.where, where) {
		g.used = time.Now()
		return g, nil
	}
	if time.Since(q.swept) >= sweepEvery {
		q.forgetExited()
		q.swept = time.Now()
	}
	q.makeRoom(socket)
	g, err := loadCPUGroup(q.proc(), pid)
	if err != nil {
		delete(q.groups, key)
		return nil, err
	}
	g.where, g.used = where, time.Now()
	q.groups[key] = g
	return g, nil
}

// makeRoom drops the least recently read group of socket when it holds its
// share, and the least recently read of all when the whole is full; held
// with q.mu.
func (q *QEMUCgroups) makeRoom(socket string) {
	var oldestHere, oldest *groupKey
	n := 0
	for k, g := range q.groups {
		if k.socket == socket {
			n++
			if oldestHere == nil || g.used.Before(q.groups[*oldestHere].used) {
				oldestHere = &k
			}
		}
		if oldest == nil || g.used.Before(q.groups[*oldest].used) {
			oldest = &k
		}
	}
	switch {
	case n >= maxGroupsPerSocket:
		delete(q.groups, *oldestHere)
	case len(q.groups) >= maxGroups:
		delete(q.groups, *oldest)
	}
}

// forgetExited drops the groups of QEMUs that have exited (a source after
// its migration), which are never read again; held with q.mu.
func (q *QEMUCgroups) forgetExited() {
	for k, g := range q.groups {
		if _, err := os.Stat(filepath.Join(q.proc(), strconv.Itoa(g.pid))); errors.Is(err, os.ErrNotExist) {
			delete(q.groups, k)
		}
	}
}

// loadCPUGroup opens the cgroup holding all of pid's threads, with only the
// CPU controllers: reading every controller's statistics on each sample
// would cost many files for two figures.
func loadCPUGroup(proc string, pid int) (*cpuGroup, error) {
	if cgroups.Mode() == cgroups.Unified {
		path, err := cgroup2.PidGroupPath(pid)
		if err != nil {
			return nil, fmt.Errorf("cgroup of QEMU pid %d: %w", pid, err)
		}
		if path == "/" {
			return nil, errRootCgroup(pid)
		}
		path = machineGroup(path)
		m, err := cgroup2.Load(path)
		if err != nil {
			return nil, fmt.Errorf("load cgroup %s: %w", path, err)
		}
		return &cpuGroup{pid: pid, path: path, dir: filepath.Join(cgroup2Root, path), v2: m}, nil
	}
	paths, err := cgroup1.ParseCgroupFile(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("cgroups of QEMU pid %d: %w", pid, err)
	}
	cpu, acct := v1Path(paths, "cpu"), v1Path(paths, "cpuacct")
	if cpu == "/" && acct == "/" {
		return nil, errRootCgroup(pid)
	}
	g := &cpuGroup{pid: pid, path: cpu, procUsage: acct == "/"}
	if cpu == "/" {
		g.path = acct
	}
	// Each controller at QEMU's own group; a controller left at the root is
	// not read at all (its figures would be the host's).
	at := func(name cgroup1.Name) (string, error) {
		if p := map[cgroup1.Name]string{cgroup1.Cpu: cpu, cgroup1.Cpuacct: acct}[name]; p != "" && p != "/" {
			return p, nil
		}
		return "", cgroup1.ErrControllerNotActive
	}
	cg, err := cgroup1.Load(at, cgroup1.WithHierarchy(cpuSubsystems),
		func(c *cgroup1.InitConfig) error { c.InitCheck = cgroup1.AllowAny; return nil })
	if err != nil {
		return nil, fmt.Errorf("load cgroup %s of QEMU pid %d: %w", g.path, pid, err)
	}
	g.v1 = cg
	if cpu != "/" {
		if g.dir, err = v1Dir(cpu); err != nil {
			return nil, fmt.Errorf("cgroup %s of QEMU pid %d: %w", cpu, pid, err)
		}
	}
	return g, nil
}

// cgroup2Root is where the unified hierarchy is mounted, as the cgroup2
// package itself assumes.
const cgroup2Root = "/sys/fs/cgroup"

// v1Dir is where the v1 cpu controller shows group path.
func v1Dir(path string) (string, error) {
	subs, err := cpuSubsystems()
	if err != nil {
		return "", err
	}
	for _, s := range subs {
		if p, ok := s.(interface{ Path(string) string }); ok && s.Name() == cgroup1.Cpu {
			return p.Path(path), nil
		}
	}
	return "", errors.New("no cgroup v1 cpu controller mounted")
}

// v1Path is the group holding all of QEMU's threads in one v1 controller;
// cpu and cpuacct are often mounted together as "cpu,cpuacct".
func v1Path(paths map[string]string, controller string) string {
	p, ok := paths[controller]
	if !ok {
		for k, v := range paths {
			if strings.Contains(","+k+",", ","+controller+",") {
				p, ok = v, true
			}
		}
	}
	if !ok || p == "" {
		return "/"
	}
	return machineGroup(p)
}

// processCPUSeconds reads utime + stime of a process (all its threads) from
// its /proc stat file, in seconds.
func processCPUSeconds(statPath string) (float64, error) {
	b, err := os.ReadFile(statPath)
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields start after its closing ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: unexpected format", statPath)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: unexpected format", statPath)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: unexpected format", statPath)
	}
	// USER_HZ is 100 on every Linux architecture Ferry runs on.
	return float64(utime+stime) / 100, nil
}

// cpuSubsystems is the host's cgroup v1 hierarchy cut down to cpu and cpuacct.
func cpuSubsystems() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, err
	}
	var out []cgroup1.Subsystem
	for _, s := range all {
		if s.Name() == cgroup1.Cpu || s.Name() == cgroup1.Cpuacct {
			out = append(out, s)
		}
	}
	return out, nil
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
