package libvirtx

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseCPUStat(t *testing.T) {
	v1 := "nr_periods 213\nnr_throttled 212\nthrottled_time 27689063838\nnr_bursts 0\nburst_time 0\n"
	got, err := parseCPUStat([]byte(v1))
	if err != nil || got.Periods != 213 || got.ThrottledPeriods != 212 || got.ThrottledSeconds < 27.68 || got.ThrottledSeconds > 27.69 {
		t.Fatalf("v1: %+v %v", got, err)
	}
	v2 := "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\nnr_periods 40\nnr_throttled 10\nthrottled_usec 1500000\n"
	got, err = parseCPUStat([]byte(v2))
	if err != nil || got.Periods != 40 || got.ThrottledPeriods != 10 || got.ThrottledSeconds != 1.5 {
		t.Fatalf("v2: %+v %v", got, err)
	}
	// A v2 group without the cpu controller enabled has usage only.
	if _, err := parseCPUStat([]byte("usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\n")); err == nil {
		t.Fatal("a cpu.stat without bandwidth counters was accepted")
	}
	if _, err := parseCPUStat([]byte("nr_periods x\nnr_throttled 1\nthrottled_time 2\n")); err == nil {
		t.Fatal("a bad count was accepted")
	}
}

// libvirt's layout: the domain's group holds emulator and vcpuN groups,
// and a quota on one of them counts throttling there only. The domain's
// and emulator's quotas can starve the migration thread; a vCPU's cannot,
// and a group without counters is left out rather than failing the rest.
func TestReadThrottlingReadsTheMigrationThreadsGroups(t *testing.T) {
	dir := t.TempDir()
	write := func(sub, stat string) {
		p := filepath.Join(dir, sub)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "cpu.stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("", "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\n")
	write("emulator", "nr_periods 50\nnr_throttled 45\nthrottled_time 3112727161\n")
	write("vcpu0", "nr_periods 41\nnr_throttled 40\nthrottled_time 3112727161\n")
	write("emulator/deeper", "nr_periods 9\nnr_throttled 9\nthrottled_time 1\n")
	got := readThrottling("/machine/qemu-1-g.libvirt-qemu", dir)
	if len(got) != 1 || got[0].Cgroup != "/machine/qemu-1-g.libvirt-qemu/emulator" || got[0].ThrottledPeriods != 45 {
		t.Fatalf("groups %+v, want the emulator's alone", got)
	}
	write("", "nr_periods 10\nnr_throttled 1\nthrottled_time 0\n")
	if got := readThrottling("/machine/qemu-1-g.libvirt-qemu", dir); len(got) != 2 || got[0].Cgroup != "/machine/qemu-1-g.libvirt-qemu" {
		t.Fatalf("groups %+v, want the domain's and the emulator's", got)
	}
	if got := readThrottling("/gone", filepath.Join(dir, "gone")); len(got) != 0 {
		t.Fatalf("a group that is not there: %+v", got)
	}
}
