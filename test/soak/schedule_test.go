package main

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// A replay is only a replay if the seed alone gives the same faults.
func TestTheSameSeedGivesTheSameSchedule(t *testing.T) {
	for _, seed := range []uint64{0, 1, 42, 1765090000123456789} {
		for _, d := range []time.Duration{3 * time.Minute, 10 * time.Minute, time.Hour} {
			a, b := schedule(seed, d), schedule(seed, d)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d, %v: two schedules differ:\n%s\n%s", seed, d, scheduleText(a), scheduleText(b))
			}
			for g := range 3 {
				for k := range 20 {
					if planMigration(seed, g, k) != planMigration(seed, g, k) {
						t.Fatalf("seed %d: migration %d of guest %d planned two ways", seed, k, g)
					}
				}
			}
		}
	}
}

// A longer run is the shorter one and more: the faults a seed gives for
// 5 minutes are the first of those it gives for 10.
func TestALongerRunExtendsTheSchedule(t *testing.T) {
	short, long := schedule(7, 5*time.Minute), schedule(7, 10*time.Minute)
	if len(long) <= len(short) || !reflect.DeepEqual(long[:len(short)], short) {
		t.Fatalf("5 min:\n%s10 min:\n%s", scheduleText(short), scheduleText(long))
	}
}

// A pinned schedule: if this changes, every seed printed by an older
// run replays something else. Change it only on purpose.
func TestAKnownSeedsSchedule(t *testing.T) {
	if text := scheduleText(schedule(1, 5*time.Minute)); text != pinnedSeed1 {
		t.Errorf("seed 1, 5m gives\n%swant\n%s", text, pinnedSeed1)
	}
}

const pinnedSeed1 = `   1.  20s of migrating, then cut-link for 24s
   2.  37s of migrating, then cut-link for 20s
   3.  28s of migrating, then restart-libvirtd on a
`

func TestDifferentSeedsGiveDifferentSchedules(t *testing.T) {
	seen := map[string]uint64{}
	for seed := range uint64(50) {
		text := scheduleText(schedule(seed, 30*time.Minute))
		if other, dup := seen[text]; dup {
			t.Fatalf("seeds %d and %d give the same schedule:\n%s", other, seed, text)
		}
		seen[text] = seed
	}
}

func TestScheduleBounds(t *testing.T) {
	kinds := map[faultKind]int{}
	nodes := map[string]int{}
	for seed := range uint64(200) {
		for _, d := range []time.Duration{0, time.Minute, 5 * time.Minute, 10 * time.Minute} {
			fs := schedule(seed, d)
			var used time.Duration
			for i, f := range fs {
				used += f.Gap + f.Hold + checkAllowance
				kinds[f.Kind]++
				if f.Gap < minGap || f.Gap > maxGap || f.Gap%time.Second != 0 {
					t.Fatalf("seed %d fault %d: gap %v", seed, i, f.Gap)
				}
				switch f.Kind {
				case cutLink:
					if f.Hold < minHold || f.Hold > maxHold || f.Node != "" {
						t.Fatalf("seed %d fault %d: %+v", seed, i, f)
					}
				case resetStreams:
					if f.Hold != 0 || f.Node != "" {
						t.Fatalf("seed %d fault %d: %+v", seed, i, f)
					}
				default:
					if f.Hold != 0 || (f.Node != "a" && f.Node != "b") {
						t.Fatalf("seed %d fault %d: %+v", seed, i, f)
					}
					nodes[f.Node]++
				}
			}
			if used > d {
				t.Fatalf("seed %d, %v: the schedule needs %v", seed, d, used)
			}
		}
	}
	for _, k := range faultKinds {
		if kinds[k] == 0 {
			t.Errorf("no schedule of 200 seeds has %s", k)
		}
	}
	if nodes["a"] == 0 || nodes["b"] == 0 {
		t.Errorf("faults by node: %v", nodes)
	}
	// Ten minutes hold a handful of faults: between 20 s and 60 s of
	// migrating and the checks' allowance each.
	for seed := range uint64(50) {
		if n := len(schedule(seed, 10*time.Minute)); n < 4 || n > 9 {
			t.Errorf("seed %d: %d faults in 10 minutes", seed, n)
		}
	}
	if fs := schedule(3, time.Minute); len(fs) != 0 {
		t.Errorf("a minute holds no fault and its checks: %s", scheduleText(fs))
	}
}

func TestMigrationPlans(t *testing.T) {
	var pre, post int
	for k := range 200 {
		p := planMigration(9, k%3, k)
		if p.PostCopy {
			post++
			if p.PostCopyAfter < 2*time.Second || p.PostCopyAfter > 5*time.Second || !slices.Contains([]int{4, 8}, p.PostCopyBandwidthMiBs) || p.BandwidthMiBs == 0 {
				t.Fatalf("post-copy plan %+v: want a switch after 2-5 s and both phases capped", p)
			}
			continue
		}
		pre++
		if p.PostCopyAfter != 0 || p.PostCopyBandwidthMiBs != 0 || !slices.Contains([]int{0, 32, 64}, p.BandwidthMiBs) {
			t.Fatalf("pre-copy plan %+v", p)
		}
	}
	if pre < 60 || post < 60 {
		t.Errorf("200 plans: %d pre-copy, %d post-copy", pre, post)
	}
	if planMigration(9, 0, 0) == planMigration(9, 1, 0) && planMigration(9, 0, 1) == planMigration(9, 1, 1) && planMigration(9, 0, 2) == planMigration(9, 1, 2) {
		t.Error("two guests migrate alike")
	}
}

func TestDurationText(t *testing.T) {
	for d, want := range map[time.Duration]string{10 * time.Minute: "10m", 90 * time.Second: "1m30s", time.Hour: "1h", 2*time.Hour + 5*time.Minute: "2h5m", 45 * time.Second: "45s"} {
		if got := durationText(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
