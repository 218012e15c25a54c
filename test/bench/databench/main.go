// Command databench moves two guests over a slow link on the test bed (the
// veth held to -link-mibs by a token bucket), each with KubeVirt's data
// settings (multifd on 8 channels, no compression, no cap) and with
// Ferry's choice (compression "auto", which learns the link from a first
// migration each way), both through Ferry's driver and proxy so that only
// the data settings differ: a guest whose pages compress (one changing
// byte a page) and one whose pages are random. It prints the medians side by side: time, bytes on the wire,
// the source QEMU's CPU and the guest's pause, with the ratio of the
// times. Run it on a bed that is up with ferryd; test/bench/data.sh
// brings one up.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ferry-vm/ferry/test/testbed"
)

func main() { testbed.Main("databench", run) }

// way is one set of data settings.
type way struct {
	name        string
	parallel    int
	compression string
}

var ways = []way{
	{"kubevirt (multifd x8)", 8, "none"},
	{"ferry (auto)", 0, "auto"},
}

// result is one migration.
type result struct {
	Seconds, CPUSeconds float64
	WireMiB             float64
	DowntimeMs          uint64
	Choice              string
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("databench", flag.ContinueOnError)
	linkMiBs := fs.Int("link-mibs", 30, "the link's rate each way, MiB/s")
	runs := fs.Int("runs", 3, "migrations of each guest each way; medians are reported")
	rate := fs.Int("dirty-rate-mibs", 16, "what each guest dirties, MiB/s")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := testbed.Open(testbed.Config{Log: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "accelerator: %s; link held to %d MiB/s; 512 MiB guests dirtying 256 MiB at %d MiB/s\n", b.Accel(), *linkMiBs, *rate)
	if err := b.LimitLink(*linkMiBs); err != nil {
		return err
	}
	defer b.LimitLink(0)
	out := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(out, "guest\tsettings\ttime s\tx kubevirt\ton the wire MiB\tsource QEMU CPU s\tpause ms\tchosen\n")
	for _, fill := range []string{"stamp", "random"} {
		name := "data-" + fill
		if err := b.StartGuest(ctx, testbed.GuestSpec{Name: name, Node: "a", MemoryMiB: 512, DirtyMiB: 256, DirtyRateMiBs: *rate, Fill: fill}); err != nil {
			return err
		}
		got := map[string][]result{}
		// Ferry learns the link from what its own migrations carried:
		// one each way first, not counted.
		for _, ft := range [][2]string{{"a", "b"}, {"b", "a"}} {
			if _, err := migrate(ctx, b, name, ft[0], ft[1], way{"warm-up", 0, "none"}); err != nil {
				b.DestroyGuest(name)
				return fmt.Errorf("%s, warm-up %s -> %s: %w", name, ft[0], ft[1], err)
			}
		}
		from, to := "a", "b"
		// Alternating, so a slow spell of the machine falls on both.
		for r := 1; r <= *runs; r++ {
			for _, w := range ways {
				res, err := migrate(ctx, b, name, from, to, w)
				if err != nil {
					b.DestroyGuest(name)
					return fmt.Errorf("%s, %s, run %d: %w", name, w.name, r, err)
				}
				fmt.Fprintf(os.Stderr, "%s %s run %d: %.1fs, %.1f MiB on the wire, QEMU CPU %.1fs, pause %d ms\n", name, w.name, r, res.Seconds, res.WireMiB, res.CPUSeconds, res.DowntimeMs)
				got[w.name] = append(got[w.name], res)
				from, to = to, from
			}
		}
		b.DestroyGuest(name)
		base := median(got[ways[0].name], func(r result) float64 { return r.Seconds })
		for _, w := range ways {
			rs := got[w.name]
			secs := median(rs, func(r result) float64 { return r.Seconds })
			fmt.Fprintf(out, "%s\t%s\t%.1f\t%.2f\t%.0f\t%.1f\t%.0f\t%s\n", fill, w.name, secs, secs/base,
				median(rs, func(r result) float64 { return r.WireMiB }), median(rs, func(r result) float64 { return r.CPUSeconds }),
				median(rs, func(r result) float64 { return float64(r.DowntimeMs) }), choice(rs))
		}
	}
	return out.Flush()
}

// migrate moves the guest once through Ferry with the way's settings and
// reads what both ferryds recorded.
func migrate(ctx context.Context, b *testbed.Bed, name, from, to string, w way) (result, error) {
	if err := b.Migrate(ctx, testbed.MigrateSpec{Name: name, From: from, To: to, Via: "ferry",
		Parallel: w.parallel, Compression: w.compression}); err != nil {
		return result{}, err
	}
	src, err := b.Job(from, name)
	if err != nil {
		return result{}, err
	}
	dst, err := b.Job(to, name)
	if err != nil {
		return result{}, err
	}
	if src.EndTime == nil || src.Proxy == nil {
		return result{}, fmt.Errorf("the source's job of %s has not ended", name)
	}
	res := result{Seconds: src.EndTime.Sub(src.StartTime).Seconds(), DowntimeMs: dst.DowntimeMs,
		WireMiB: float64(src.Proxy.Bytes["memory"]["toTarget"]) / (1 << 20), Choice: src.Proxy.DataChoice}
	if src.QEMU != nil {
		res.CPUSeconds = src.QEMU.CPUUsageSeconds
	}
	return res, nil
}

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// choice is what Ferry chose, shortened to its verdict, and how often.
func choice(rs []result) string {
	seen := map[string]int{}
	for _, r := range rs {
		if r.Choice != "" {
			verdict, _, _ := strings.Cut(r.Choice, ":")
			seen[verdict]++
		}
	}
	var parts []string
	for k, n := range seen {
		parts = append(parts, fmt.Sprintf("%s (%dx)", k, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}
