// Command evacuatebench evacuates the same four guests from node a to
// node b twice on the test bed: once by Ferry (ferryctl evacuate: its
// plan's order, two slots, the link given to the migration nearest its
// switch-over) and once as KubeVirt's defaults would (two at once, the
// link split evenly, name order, 150 s per GiB then post-copy), each
// through Ferry's driver and proxy so that only the scheduling differs.
// It prints, side by side, the total time, the longest guest pause and
// the migrations that failed or fell back to post-copy, and the ratio of
// the totals. Run it on a bed that is up with ferryd;
// test/bench/evacuate.sh brings one up.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/ferry-vm/ferry/test/testbed"
)

func main() { testbed.Main("evacuatebench", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("evacuatebench", flag.ContinueOnError)
	link := fs.Int("link-mibs", 64, "the migration link's bandwidth in MiB/s, shared by the migrations of both ways")
	runs := fs.Int("runs", 1, "evacuations of each way, alternating")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := testbed.Open(testbed.Config{Log: os.Stderr})
	if err != nil {
		return err
	}
	logf("accelerator: %s; link %d MiB/s; guests: %s", b.Accel(), *link, describe(guests))
	var results []evacuation
	for r := 1; r <= *runs; r++ {
		for _, way := range []string{wayFerry, wayKubeVirt} {
			ev, err := evacuate(ctx, b, way, *link)
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", way, r, err)
			}
			ev.Run = r
			results = append(results, ev)
			logf("%s", ev.summary())
		}
	}
	fmt.Println(report(results))
	return nil
}
