package migration

import (
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

func throttling(group string, periods, throttled uint64, secs float64) libvirtx.CgroupThrottling {
	return libvirtx.CgroupThrottling{Cgroup: group, Periods: periods, ThrottledPeriods: throttled, ThrottledSeconds: secs}
}

func TestMostThrottledGroupOverTheJob(t *testing.T) {
	const dom, emu = "/machine/d", "/machine/d/emulator"
	first := []libvirtx.CgroupThrottling{throttling(dom, 90, 90, 7), throttling(emu, 0, 0, 0)}
	// The domain's counts are from before the job (a quota since lifted);
	// an emulator quota set during the job throttles the emulator alone.
	now := []libvirtx.CgroupThrottling{throttling(dom, 90, 90, 7), throttling(emu, 50, 45, 3.5)}
	got, pct := mostThrottled(first, now)
	if got.Cgroup != emu || got.Periods != 50 || got.ThrottledPeriods != 45 || pct != 90 {
		t.Fatalf("got %+v at %.0f %%, want the emulator's 45 of 50 periods", got, pct)
	}
	if got, _ := mostThrottled(first, first); got.Periods != 0 {
		t.Fatalf("no periods during the job, got %+v", got)
	}
	// Two throttled periods of a group that hardly ran do not outrank one
	// throttled in most of many.
	got, pct = mostThrottled(nil, []libvirtx.CgroupThrottling{throttling(emu, 2, 2, 0.1), throttling(dom, 1000, 800, 60)})
	if got.Cgroup != dom || pct != 80 {
		t.Fatalf("short-lived group won: %+v at %.0f %%", got, pct)
	}
	if got, pct := mostThrottled(nil, []libvirtx.CgroupThrottling{throttling(emu, 2, 2, 0.1)}); got.Cgroup != emu || pct != 100 {
		t.Fatalf("the only group, however short: %+v at %.0f %%", got, pct)
	}
	// A group recreated under the same name counts from zero again.
	got, pct = mostThrottled([]libvirtx.CgroupThrottling{throttling(emu, 500, 10, 1)}, []libvirtx.CgroupThrottling{throttling(emu, 20, 5, 0.5)})
	if got.ThrottledPeriods != 5 || pct != 25 {
		t.Fatalf("recreated group: %+v at %.0f %%", got, pct)
	}
}

// Readings on iteration events come milliseconds apart; the throttled share
// is over the whole job and must not wait for a rate window.
func TestCPUFiguresKeepThrottlingOnCloseReadings(t *testing.T) {
	tr, j := &Tracker{}, &job{}
	t0 := time.Now()
	read := func(at time.Duration, periods, throttled uint64) *api.QEMUFigures {
		f := tr.cpuFigures(j, libvirtx.QEMUCPU{PID: 7, Cgroup: "/machine/d", Time: t0.Add(at),
			Throttling: []libvirtx.CgroupThrottling{throttling("/machine/d", periods, throttled, float64(throttled)/10)}})
		j.view.QEMU = f
		return f
	}
	read(0, 100, 0)
	read(time.Second, 110, 10)
	f := read(time.Second+10*time.Millisecond, 120, 20)
	if f.ThrottledPeriods != 20 || f.ThrottledPercentPeriods != 100 || f.ThrottledCgroup != "/machine/d" {
		t.Fatalf("figures %+v, want 20 of 20 periods throttled in /machine/d", f)
	}
}

// A group missing from the job's first reading counts from when it was
// first read: its throttling before the job (at boot, say) is not the job's.
func TestAGroupReadLateCountsFromThen(t *testing.T) {
	tr, j := &Tracker{}, &job{}
	t0 := time.Now()
	read := func(at time.Duration, groups ...libvirtx.CgroupThrottling) *api.QEMUFigures {
		f := tr.cpuFigures(j, libvirtx.QEMUCPU{PID: 7, Cgroup: "/machine/d", Time: t0.Add(at), Throttling: groups})
		j.view.QEMU = f
		return f
	}
	read(0, throttling("/machine/d", 100, 0, 0))
	read(time.Second, throttling("/machine/d", 110, 0, 0), throttling("/machine/d/emulator", 5000, 4000, 300))
	f := read(2*time.Second, throttling("/machine/d", 120, 0, 0), throttling("/machine/d/emulator", 5010, 4001, 300.1))
	if f.ThrottledCgroup != "/machine/d/emulator" || f.ThrottledPeriods != 1 || f.ThrottledPercentPeriods != 10 {
		t.Fatalf("figures %+v, want the emulator's 1 of 10 periods since it was first read", f)
	}
}
