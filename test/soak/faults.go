package main

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// inject makes fault n happen, after noting which migrations it falls on.
func (s *soak) inject(ctx context.Context, n int, f fault) {
	in := injection{n: n, at: time.Since(s.start), f: f, during: s.inFlight()}
	s.logf("fault %d: %s", n, f)
	if len(in.during) == 0 {
		s.logf("  (between migrations)")
	}
	for _, d := range in.during {
		s.logf("  during %s", d)
	}
	var err error
	// Each daemon's restart is bounded as the bed bounds its waits; a
	// daemon that does not come back fails the run.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	switch f.Kind {
	case crashFerryd:
		s.bump(s.ferrydEpoch, f.Node)
		err = s.bed.CrashFerryd(fctx, f.Node)
	case restartFerryd:
		s.bump(s.ferrydEpoch, f.Node)
		err = s.bed.RestartFerryd(fctx, f.Node)
	case restartLibvirtd:
		s.bump(s.libvirtdEpoch, f.Node)
		err = s.bed.RestartLibvirtd(fctx, f.Node)
	case cutLink:
		if err = s.bed.CutLink(); err == nil {
			sleepCtx(ctx, f.Hold)
			err = s.bed.RestoreLink()
		}
	case resetStreams:
		if err = s.bed.ResetMigration(); err != nil {
			// Between migrations there is nothing to reset: a fault that
			// missed, not a failure.
			in.result, err = "nothing to reset: "+err.Error(), nil
		}
	}
	if err != nil {
		in.result = "failed: " + err.Error()
		s.violate(fmt.Sprintf("fault %d (%s) could not be injected: %v", n, f, err))
	}
	s.mu.Lock()
	s.injected = append(s.injected, in)
	s.mu.Unlock()
}

func (s *soak) bump(epochs map[string]int, node string) {
	s.mu.Lock()
	epochs[node]++
	s.mu.Unlock()
}

// inFlight describes the migrations under way, as the migrators and the
// source's ferryd see them.
func (s *soak) inFlight() []string {
	s.mu.Lock()
	var ms []*migration
	for _, m := range s.current {
		c := *m
		ms = append(ms, &c)
	}
	s.mu.Unlock()
	sort.Slice(ms, func(i, j int) bool { return ms[i].Guest < ms[j].Guest })
	var out []string
	for _, m := range ms {
		d := fmt.Sprintf("%s, %.1fs in", m, time.Since(m.Start).Seconds())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		j, err := s.ferryd(m.From).Job(ctx, m.Guest)
		cancel()
		if err == nil && m.mine(j) {
			d += fmt.Sprintf(": %s %s, pass %d, %.0f%% sent", j.Phase, j.Mode, j.Iteration, j.ProgressPercent)
		}
		out = append(out, d)
	}
	return out
}
