package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// finalChecks compare the ferryds' footprints with their baselines and
// look for stale records in their state dirs; what they find fails the
// run, as a violation found after a fault does.
func (s *soak) finalChecks() {
	lines, grew := s.usage.compare()
	fmt.Printf("soak: ferryd's footprint at each rest (baseline: its first after a whole stretch of migrating):\n%s\n", strings.Join(lines, "\n"))
	for _, g := range grew {
		s.addFinding("footprint: " + g)
	}
	held := map[string]string{}
	for i := range s.o.guests {
		g := guestName(i)
		if p, err := readPlacement(s.bed, g); err == nil {
			for _, c := range []copyOn{p.A, p.B} {
				if c.Present && (c.Reason == rsRunningPostCopyFailed || (c.State == stPaused && c.Reason == 13)) {
					held[c.Node+"/"+g] = c.String()
				}
			}
		}
	}
	lines, stale := s.stateDirReport(held)
	fmt.Printf("soak: ferryd's state dirs after the run:\n%s\n", strings.Join(lines, "\n"))
	for _, st := range stale {
		s.addFinding("stale state: " + st)
	}
}

// addFinding records what the final checks found; unlike violate it
// stops nothing, the run being over.
func (s *soak) addFinding(what string) {
	s.mu.Lock()
	s.violations = append(s.violations, what)
	s.mu.Unlock()
}

// report prints the run's faults and what broke, and with a failure the
// command that replays it and where the daemons' logs are.
func (s *soak) report(interrupted bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Printf("soak: seed %d, duration %s: %d faults injected, %d migrations started, %d completed\n",
		s.o.seed, durationText(s.o.duration), len(s.injected), s.migrations, s.completed)
	for _, in := range s.injected {
		fmt.Printf("  %s\n", in)
	}
	replay := fmt.Sprintf("make soak SOAK_SEED=%d SOAK_DURATION=%s", s.o.seed, durationText(s.o.duration))
	switch {
	case len(s.violations) > 0:
		fmt.Printf("soak: FAILED: %d violation(s):\n", len(s.violations))
		for _, v := range s.violations {
			fmt.Printf("- %s\n", v)
		}
		fmt.Printf("soak: the daemons' logs: %s (ferryd.log, libvirtd.log, consoles under run/consoles)\n", filepath.Join(s.bed.Dir(), "{a,b}"))
		fmt.Printf("soak: replay: %s\n", replay)
		return errors.New("invariants broken")
	case interrupted:
		fmt.Printf("soak: interrupted; replay: %s\n", replay)
		return errors.New("interrupted")
	}
	fmt.Printf("soak: every invariant held (replay: %s)\n", replay)
	return nil
}

// durationText is a duration as one would type it: 10m, not 10m0s.
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
