package main

import (
	"flag"
	"fmt"
	"time"
)

type options struct {
	seed     uint64
	seedSet  bool
	duration time.Duration
	guests   int
	// The guests: modest, as TCG on two cores runs three of them and their
	// migrations at once.
	memoryMiB, dirtyMiB, dirtyRateMiBs int
	// settleTimeout bounds the wait, after a fault, for every migration in
	// flight to end on both nodes and libvirt to show each guest at rest.
	settleTimeout time.Duration
	// keepGoing lists a disagreement of Ferry's records with libvirt at
	// the end rather than stopping there, so that one known bug does not
	// hide the next.
	keepGoing bool
}

func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	o := options{}
	seed := fs.Uint64("seed", 0, "the seed of the fault schedule and of each migration's mode (default: from the clock)")
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "about how long to run: the schedule fits in it as many faults as their checks leave room for")
	fs.IntVar(&o.guests, "guests", 3, "guests that check their own memory, started on node a")
	fs.IntVar(&o.memoryMiB, "memory-mib", 256, "each guest's memory")
	fs.IntVar(&o.dirtyMiB, "dirty-mib", 96, "how much of it each guest dirties and checks")
	fs.IntVar(&o.dirtyRateMiBs, "dirty-rate-mibs", 4, "how fast each guest dirties it, MiB/s")
	fs.DurationVar(&o.settleTimeout, "settle-timeout", 3*time.Minute, "how long, after a fault, the migrations in flight may take to end on both nodes")
	fs.BoolVar(&o.keepGoing, "keep-going", false, "go on past a disagreement of Ferry's records with libvirt, listing it at the end (a guest on two nodes or none, or its memory not whole, still stops the run)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { o.seedSet = o.seedSet || f.Name == "seed" })
	o.seed = *seed
	switch {
	case o.duration <= 0:
		return o, fmt.Errorf("--duration %v: want a positive duration", o.duration)
	case o.guests < 1 || o.guests > 9:
		return o, fmt.Errorf("--guests %d: want 1 to 9", o.guests)
	case o.settleTimeout < 30*time.Second:
		return o, fmt.Errorf("--settle-timeout %v: want 30s or more", o.settleTimeout)
	case o.dirtyRateMiBs < 1:
		return o, fmt.Errorf("--dirty-rate-mibs %d: the guests must keep dirtying (1 or more)", o.dirtyRateMiBs)
	}
	return o, nil
}
