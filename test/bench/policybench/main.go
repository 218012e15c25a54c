// Command policybench migrates a matrix of guests on the test bed under
// four convergence policies (libvirt's defaults with KubeVirt's deadline,
// KubeVirt's classic monitor, and Ferry's policy in act mode with and
// without post-copy), repeated, and prints per case and policy the
// outcomes, the median total time and its spread, libvirt's downtime
// statistic, the pause read off both libvirtds' lifecycle events, time in
// post-copy and guest CPU throttle, with the ratios of Ferry's median total
// time to KubeVirt's. Run it on a bed that is up, under the bed's lock;
// test/bench/policy.sh does both.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// guestCase is one guest of the matrix: its load against the bandwidth cap.
type guestCase struct {
	Name      string `json:"name"`
	Load      string `json:"load"`
	MemoryMiB int    `json:"memoryMiB"`
	DirtyMiB  int    `json:"dirtyMiB"`
	// RateMiBs: 0 dirties as fast as the vCPU can (150+ MiB/s under TCG),
	// -1 touches the working set once and idles.
	RateMiBs int `json:"rateMiBs"`
}

// cases are sized for TCG and a 48 MiB/s cap: a 16 MiB set re-dirtied at
// full speed needs about 370 ms to switch over, just above libvirt's
// 300 ms and inside a 500 ms cap; the others span idle to far over the cap
// with working sets from half of memory to three quarters.
var cases = []guestCase{
	{"idle", "well under (idle)", 512, 256, -1},
	{"slow", "well under", 512, 256, 16},
	{"near", "near", 512, 256, 40},
	{"small-hot", "over, small set", 256, 16, 0},
	{"over", "over", 512, 256, 64},
	{"far-over", "far over", 512, 256, 0},
	{"large-over", "over, large set", 512, 384, 96},
}

// policyKind is one way of steering a migration.
type policyKind struct {
	Name string
	// Mode is ferryd's policy mode for the migration.
	Mode string
	// PostCopy starts the migration with post-copy enabled (allowPostCopy).
	PostCopy bool
	// Monitor: the bench runs KubeVirt's classic monitor beside it.
	Monitor bool
}

var policies = map[string]policyKind{
	"none":              {Name: "none", Mode: "observe", Monitor: true},
	"kubevirt-legacy":   {Name: "kubevirt-legacy", Mode: "observe", PostCopy: true, Monitor: true},
	"ferry":             {Name: "ferry", Mode: "act", PostCopy: true},
	"ferry-no-postcopy": {Name: "ferry-no-postcopy", Mode: "act"},
}

type options struct {
	bandwidth, postCopyBandwidth int
	maxDowntimeMs                uint64
	perGiB                       time.Duration
	settle                       time.Duration
	runs                         int
	// once are the policies run in the first run only.
	once map[string]bool
}

func main() { testbed.Main("policybench", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("policybench", flag.ContinueOnError)
	var o options
	fs.IntVar(&o.bandwidth, "bandwidth-mibs", 48, "pre-copy bandwidth cap in MiB/s, the same for every policy")
	fs.IntVar(&o.postCopyBandwidth, "postcopy-bandwidth-mibs", -1, "post-copy bandwidth cap in MiB/s (-1: the pre-copy cap; the cap stands for the link)")
	fs.Uint64Var(&o.maxDowntimeMs, "max-downtime-ms", 500, "maxDowntimeMs of Ferry's policy, and the downtime the goals are checked against")
	perGiB := fs.Int("completion-timeout-per-gib", 150, "KubeVirt's completionTimeoutPerGiB in seconds, the deadline of none and kubevirt-legacy")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "pause between migrations")
	only := fs.String("cases", "", "comma-separated case names to run (default: all: "+caseNames()+")")
	pols := fs.String("policies", "none,kubevirt-legacy,ferry,ferry-no-postcopy", "comma-separated policies, in the order run: none, kubevirt-legacy, ferry, ferry-no-postcopy")
	fs.IntVar(&o.runs, "runs", 1, "repetitions of the matrix; the policies take turns within each")
	once := fs.String("once", "", "comma-separated policies to run in the first repetition only, if run at all (the ratios need ferry and kubevirt-legacy)")
	jsonOut := fs.String("json", "", "also write every run's figures to this file")
	reread := fs.String("report", "", "print the report of an earlier run's --json file instead of running")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.bandwidth <= 0 {
		return fmt.Errorf("--bandwidth-mibs %d: want a cap above 0 (the cases are sized against it)", o.bandwidth)
	}
	if o.postCopyBandwidth < 0 {
		o.postCopyBandwidth = o.bandwidth
	}
	if o.maxDowntimeMs == 0 {
		return errors.New("--max-downtime-ms 0: want at least 1")
	}
	if *perGiB <= 0 {
		return fmt.Errorf("--completion-timeout-per-gib %d: want at least 1", *perGiB)
	}
	o.perGiB = time.Duration(*perGiB) * time.Second
	if o.runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", o.runs)
	}
	selected, err := pick(*only)
	if err != nil {
		return err
	}
	var kinds []policyKind
	for _, name := range strings.Split(*pols, ",") {
		k, ok := policies[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("--policies: unknown policy %q (want none, kubevirt-legacy, ferry or ferry-no-postcopy)", name)
		}
		kinds = append(kinds, k)
	}
	o.once = map[string]bool{}
	if *once != "" {
		for _, name := range strings.Split(*once, ",") {
			name = strings.TrimSpace(name)
			if _, ok := policies[name]; !ok {
				return fmt.Errorf("--once: unknown policy %q (want none, kubevirt-legacy, ferry or ferry-no-postcopy)", name)
			}
			o.once[name] = true
		}
	}
	if *reread != "" {
		raw, err := os.ReadFile(*reread)
		if err != nil {
			return err
		}
		var results []result
		if err := json.Unmarshal(raw, &results); err != nil {
			return fmt.Errorf("--report %s: %w", *reread, err)
		}
		report(os.Stdout, o, selected, kinds, results)
		return nil
	}

	b, err := testbed.Open(testbed.Config{Log: os.Stderr})
	if err != nil {
		return err
	}
	if o.maxDowntimeMs > 500 {
		// A request can only lower ferryd's cap, whose default is 500 ms.
		if err := b.SetFerrydArgs(ctx, fmt.Sprintf("--max-downtime-ms=%d", o.maxDowntimeMs)); err != nil {
			return err
		}
	}
	lg, err := listenEvents(ctx, b, "a", "b")
	if err != nil {
		return err
	}
	t0 := time.Now()
	var results []result
	for run := 1; run <= o.runs; run++ {
		for i, c := range selected {
			rs, err := runCase(ctx, b, lg, o, run, c, turn(kinds, o.once, run, i))
			results = append(results, rs...)
			// Written as it goes: a run cut short keeps what it measured.
			if werr := writeJSON(*jsonOut, results); werr != nil {
				return werr
			}
			if err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(os.Stderr, "policybench: %d migrations in %s\n", len(results), time.Since(t0).Round(time.Second))
	report(os.Stdout, o, selected, kinds, results)
	return nil
}

func writeJSON(path string, results []result) error {
	if path == "" {
		return nil
	}
	out, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}

// turn is the order of the policies for the i-th case of a run: each run
// takes every policy case by case, so drift in the machine's load over the
// run hits all alike, and each case starts with another policy, so no
// policy always meets the guest first.
func turn(kinds []policyKind, once map[string]bool, run, i int) []policyKind {
	var ks []policyKind
	for _, k := range kinds {
		if run == 1 || !once[k.Name] {
			ks = append(ks, k)
		}
	}
	n := (i + run - 1) % len(ks)
	return append(append([]policyKind(nil), ks[n:]...), ks[:n]...)
}

func caseNames() string {
	var n []string
	for _, c := range cases {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

func pick(only string) ([]guestCase, error) {
	if only == "" {
		return cases, nil
	}
	var out []guestCase
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, c := range cases {
			if c.Name == strings.TrimSpace(name) {
				out, found = append(out, c), true
			}
		}
		if !found {
			return nil, fmt.Errorf("--cases: unknown case %q (cases: %s)", name, caseNames())
		}
	}
	return out, nil
}
