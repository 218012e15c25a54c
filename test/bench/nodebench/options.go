package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// defaultCounts end at what the project's 2-core machine holds: an idle
// guest under TCG costs it about 5 % of a core, so 40 of them take both
// cores, and starting more fails now and then and takes minutes. A
// machine with KVM, or more cores, holds more (--launchers 0,10,30,60,110).
const defaultCounts = "0,10,20,40"

type options struct {
	// counts are the launcher counts measured, ascending: the launchers of
	// one count stay for the next, which only adds the difference.
	counts []int
	window time.Duration
	settle time.Duration
	probes int
	// scrapes is how many GETs of /metrics are timed at each count.
	scrapes   int
	parallel  int
	memoryMiB int
	jsonOut   string
	verbose   bool
}

func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("nodebench", flag.ContinueOnError)
	counts := fs.String("launchers", defaultCounts, "comma-separated launcher counts, ascending; each is measured with that many idle guests on node a, the last the most the machine holds")
	o := options{}
	fs.DurationVar(&o.window, "window", 30*time.Second, "how long ferryd's CPU and libvirt calls are counted at each count")
	fs.DurationVar(&o.settle, "settle", 10*time.Second, "wait after ferryd sees every launcher, before the window")
	fs.IntVar(&o.probes, "probes", 3, "launchers started and timed until ferryd has them up, at each count (the median is reported)")
	fs.IntVar(&o.scrapes, "scrapes", 20, "GETs of /metrics timed at each count (the median is reported)")
	fs.IntVar(&o.parallel, "parallel", 4, "launchers started at once")
	fs.IntVar(&o.memoryMiB, "memory-mib", 128, "each guest's memory (the bed's smallest is 128 MiB)")
	fs.StringVar(&o.jsonOut, "json", "", "also write the settings, every count's figures, the fitted lines and the goals to this file")
	fs.BoolVar(&o.verbose, "v", false, "also print the bed's own progress lines (two per launcher)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.counts, err = parseCounts(*counts); err != nil {
		return o, fmt.Errorf("--launchers: %w", err)
	}
	switch {
	case o.window < time.Second:
		return o, fmt.Errorf("--window %v: want 1s or more (ferryd samples once a second)", o.window)
	case o.settle < 0:
		return o, fmt.Errorf("--settle %v: want 0 or more", o.settle)
	case o.probes < 0:
		return o, fmt.Errorf("--probes %d: want 0 or more", o.probes)
	case o.scrapes < 1:
		return o, fmt.Errorf("--scrapes %d: want 1 or more", o.scrapes)
	case o.parallel < 1:
		return o, fmt.Errorf("--parallel %d: want 1 or more", o.parallel)
	case o.memoryMiB < 128:
		return o, fmt.Errorf("--memory-mib %d: the bed's guests need 128 or more", o.memoryMiB)
	}
	return o, nil
}

// parseCounts reads "0,10,30,60". Ascending, because a count's launchers
// are kept for the next one; starting them is most of the bench's time.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a launcher count (0 or more)", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("%d after %d: counts must ascend", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}
