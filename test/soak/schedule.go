package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// A fault the soak injects. The schedule is a pure function of the seed
// and the duration, so a run that failed is replayed by its seed: the same
// faults in the same order, each the same time after the migrations were
// let go again. Where in a migration each lands still depends on the
// machine; the seed fixes what, in which order, and after how long.
type fault struct {
	// Gap is how long the migrations run, from the end of the previous
	// fault's checks (the first: from the guests' start), before it.
	Gap  time.Duration
	Kind faultKind
	// Node is the node a daemon is killed or restarted on.
	Node string
	// Hold is how long the link stays cut.
	Hold time.Duration
}

type faultKind string

const (
	crashFerryd     faultKind = "crash-ferryd"     // SIGKILL, started again as its DaemonSet would
	restartFerryd   faultKind = "restart-ferryd"   // SIGTERM, SIGKILL 10 s later if still there, started again
	restartLibvirtd faultKind = "restart-libvirtd" // its guests' QEMUs run on
	cutLink         faultKind = "cut-link"         // both ends of the veth down for Hold, then up
	resetStreams    faultKind = "reset-streams"    // a RST on every connection of either proxy
)

// faultKinds is what the RNG draws from, by index: any change to it, an
// appended kind too, gives every seed a new schedule (a pinned one is
// unit-tested), so that older seeds no longer replay.
var faultKinds = []faultKind{crashFerryd, restartFerryd, restartLibvirtd, cutLink, resetStreams}

func (f fault) String() string {
	switch f.Kind {
	case cutLink:
		return fmt.Sprintf("%s for %v", f.Kind, f.Hold)
	case resetStreams:
		return string(f.Kind)
	}
	return fmt.Sprintf("%s on %s", f.Kind, f.Node)
}

// The bounds of the schedule, from the brief of the soak: a fault every 20
// to 60 s of migrating, a link cut from 1 to 50 s.
const (
	minGap, maxGap   = 20 * time.Second, 60 * time.Second
	minHold, maxHold = 1 * time.Second, 50 * time.Second
)

// checkAllowance is what settling and checking after a fault takes here
// on a good day (2 cores, TCG): the schedule leaves room for it so that a
// run lasts about its duration. A slower settle makes the run longer; it
// never drops a fault.
const checkAllowance = 45 * time.Second

// schedule is the soak's faults for a seed and a duration: as many as fit,
// each fault's gap, its own length (a cut's hold) and the allowance for
// its checks counted.
func schedule(seed uint64, d time.Duration) []fault {
	r := rand.New(rand.NewPCG(seed, 0x50a4_fa17))
	var out []fault
	used := time.Duration(0)
	for {
		f := fault{
			Gap:  minGap + time.Duration(r.Int64N(int64((maxGap-minGap)/time.Second)+1))*time.Second,
			Kind: faultKinds[r.IntN(len(faultKinds))],
			Node: []string{"a", "b"}[r.IntN(2)],
		}
		hold := minHold + time.Duration(r.Int64N(int64((maxHold-minHold)/time.Second)+1))*time.Second
		switch f.Kind {
		case cutLink:
			f.Node, f.Hold = "", hold
		case resetStreams:
			f.Node = ""
		}
		used += f.Gap + f.Hold + checkAllowance
		if used > d {
			return out
		}
		out = append(out, f)
	}
}

// migrationPlan is how one migration of a guest goes: the k-th migration
// of guest g (both from 0), from the seed alone.
type migrationPlan struct {
	PostCopy bool
	// PostCopyAfter is when the source switches to post-copy.
	PostCopyAfter time.Duration
	// BandwidthMiBs caps pre-copy (0: none); PostCopyBandwidthMiBs caps
	// post-copy, which keeps it open long enough for a fault to break it.
	BandwidthMiBs, PostCopyBandwidthMiBs int
}

func (p migrationPlan) String() string {
	if p.PostCopy {
		return fmt.Sprintf("post-copy after %v (pre-copy %s, post-copy %d MiB/s)", p.PostCopyAfter, capText(p.BandwidthMiBs), p.PostCopyBandwidthMiBs)
	}
	return "pre-copy, " + capText(p.BandwidthMiBs)
}

func capText(mibs int) string {
	if mibs == 0 {
		return "uncapped"
	}
	return fmt.Sprintf("%d MiB/s", mibs)
}

func planMigration(seed uint64, g, k int) migrationPlan {
	r := rand.New(rand.NewPCG(seed, 0x3161_0000_0000_0000|uint64(g)<<32|uint64(k)))
	if r.IntN(2) == 0 {
		return migrationPlan{BandwidthMiBs: []int{0, 32, 64}[r.IntN(3)]}
	}
	return migrationPlan{
		PostCopy:              true,
		PostCopyAfter:         time.Duration(2+r.IntN(4)) * time.Second,
		BandwidthMiBs:         32,
		PostCopyBandwidthMiBs: []int{4, 8}[r.IntN(2)],
	}
}

// scheduleText is the schedule as printed at the start, a line a fault.
func scheduleText(fs []fault) string {
	if len(fs) == 0 {
		return "  (none fits: the guests migrate, then everything is checked once)\n"
	}
	var b strings.Builder
	for i, f := range fs {
		fmt.Fprintf(&b, "  %2d. %3ds of migrating, then %s\n", i+1, int(f.Gap/time.Second), f)
	}
	return b.String()
}
