package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
)

// cfsPeriodUs is the CFS period LimitQEMUCPU sets its quota against (the
// kernel's and libvirt's default).
const cfsPeriodUs = 100000

// LimitQEMUCPU caps the guest's QEMU on a node at percent of one CPU with
// libvirt's own knob, the domain's global_quota: a CFS quota on the
// domain's cgroup over all its vCPU and emulator threads, as a pod CPU
// limit caps virt-launcher's QEMU. It checks libvirt applied it, and the
// returned function lifts it again.
func (b *Bed) LimitQEMUCPU(node, guest string, percent int) (lift func() error, err error) {
	if percent < 1 || percent > 100 {
		return nil, fmt.Errorf("testbed: CPU limit %d %% for guest %s: want 1 to 100 %% of one CPU", percent, guest)
	}
	if err := checkGuestName(guest); err != nil {
		return nil, err
	}
	set := func(quota int64) error {
		l, err := b.Libvirt(node)
		if err != nil {
			return err
		}
		defer l.Disconnect()
		dom, err := l.DomainLookupByName(guest)
		if err != nil {
			return fmt.Errorf("testbed: guest %s on node %s: %w", guest, node, err)
		}
		params := []libvirt.TypedParam{
			{Field: "global_period", Value: *libvirt.NewTypedParamValueUllong(cfsPeriodUs)},
			{Field: "global_quota", Value: *libvirt.NewTypedParamValueLlong(quota)},
		}
		if err := l.DomainSetSchedulerParametersFlags(dom, params, uint32(libvirt.DomainAffectLive)); err != nil {
			return fmt.Errorf("testbed: setting global_quota %d on guest %s on node %s: %w", quota, guest, node, err)
		}
		got, err := l.DomainGetSchedulerParametersFlags(dom, 16, uint32(libvirt.DomainAffectLive))
		if err != nil {
			return fmt.Errorf("testbed: reading back the scheduler parameters of guest %s on node %s: %w", guest, node, err)
		}
		for _, p := range got {
			if p.Field == "global_quota" {
				// Lifted, libvirt reads back -1 or the kernel's "no limit".
				if v, ok := p.Value.I.(int64); ok && (v == quota || quota < 0 && (v < 0 || v >= 1<<40)) {
					return nil
				}
				return fmt.Errorf("testbed: guest %s on node %s: libvirt reports global_quota %v after setting %d", guest, node, p.Value.I, quota)
			}
		}
		return fmt.Errorf("testbed: guest %s on node %s: libvirt reports no global_quota", guest, node)
	}
	if err := set(int64(percent) * cfsPeriodUs / 100); err != nil {
		return nil, err
	}
	logf(b.cfg.Log, "limited QEMU of guest %s on node %s to %d %% of a CPU (libvirt global_quota)", guest, node, percent)
	return func() error { return set(-1) }, nil
}

// CgroupCPUStat is a cgroup's cumulative CFS bandwidth counters, read from
// its own cpu.stat.
type CgroupCPUStat struct {
	Cgroup           string
	Periods          uint64
	ThrottledPeriods uint64
	ThrottledSeconds float64
}

// QEMUCgroupCPUStat reads cpu.stat of the cgroup libvirt made for the
// guest's domain on a node (the group above QEMU's emulator and vCPU
// groups, where global_quota is set), found from QEMU's /proc entry.
func (b *Bed) QEMUCgroupCPUStat(node, guest string) (CgroupCPUStat, error) {
	pid, err := b.QEMUPID(node, guest)
	if err != nil {
		return CgroupCPUStat{}, err
	}
	path, v2, err := cpuCgroupOf(pid)
	if err != nil {
		return CgroupCPUStat{}, err
	}
	path = strings.TrimSuffix(path, "/emulator")
	mnt, err := cpuMount(v2)
	if err != nil {
		return CgroupCPUStat{}, err
	}
	f := filepath.Join(mnt, path, "cpu.stat")
	raw, err := os.ReadFile(f)
	if err != nil {
		return CgroupCPUStat{}, fmt.Errorf("testbed: QEMU of guest %s: %w", guest, err)
	}
	st := CgroupCPUStat{Cgroup: path}
	seen := 0
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			st.Periods = n
		case "nr_throttled":
			st.ThrottledPeriods = n
		case "throttled_time":
			st.ThrottledSeconds = float64(n) / 1e9
		case "throttled_usec":
			st.ThrottledSeconds = float64(n) / 1e6
		default:
			continue
		}
		seen++
	}
	if seen != 3 {
		return st, fmt.Errorf("testbed: %s holds no CFS bandwidth counters:\n%s", f, raw)
	}
	return st, nil
}

// cpuCgroupOf is the cgroup of pid's main thread in the cpu controller's
// hierarchy, and whether that is the unified (v2) one.
func cpuCgroupOf(pid int) (string, bool, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", false, err
	}
	unified := ""
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return parts[2], false, nil
			}
		}
	}
	if unified == "" {
		return "", false, fmt.Errorf("testbed: pid %d is in no cpu cgroup", pid)
	}
	return unified, true, nil
}

// cpuMount is where the v1 cpu controller, or the unified hierarchy, is mounted.
func cpuMount(v2 bool) (string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		if v2 && fields[2] == "cgroup2" {
			return fields[1], nil
		}
		if !v2 && fields[2] == "cgroup" {
			for _, o := range strings.Split(fields[3], ",") {
				if o == "cpu" {
					return fields[1], nil
				}
			}
		}
	}
	return "", errors.New("testbed: no mounted cgroup hierarchy with the cpu controller")
}
