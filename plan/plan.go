package plan

import (
	"cmp"
	"slices"

	"github.com/ferry-vm/ferry/api"
)

// Order puts a plan's entries in the order they are to move: those that
// converge, shortest first (the node empties fastest of guests, and the
// link is free sooner for the long ones), then those that need post-copy,
// whose guests run split for a while, then those that can move but could
// not be predicted; what cannot move ends the list. Entries are numbered from 1, and each is given a
// target in turn.
func Order(entries []api.PlanEntry, targets []string) {
	rank := func(e api.PlanEntry) int {
		switch {
		case !e.Migratable || e.Prediction != nil && e.Prediction.Strategy == api.StrategyCannotMove:
			return 3
		case e.Prediction == nil:
			return 2
		case e.Prediction.Strategy == api.StrategyPostCopy:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(entries, func(a, b api.PlanEntry) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		if a.Prediction != nil && b.Prediction != nil {
			return cmp.Compare(a.Prediction.Seconds, b.Prediction.Seconds)
		}
		return cmp.Compare(a.Domain, b.Domain)
	})
	n := 0
	for i := range entries {
		entries[i].Order = i + 1
		// KubeVirt picks a VMI's target, and moves it.
		if rank(entries[i]) < 3 && len(targets) > 0 && entries[i].Mover == api.MoverFerry {
			entries[i].Target = targets[n%len(targets)]
			n++
		}
	}
}

// Schedule lays the entries out in time with parallel slots and one link,
// as the node's scheduler runs them: each starts when a slot frees, its
// setup runs beside the others' transfers, and its memory goes when the
// link is free (the scheduler gives the link to the migration nearest its
// switch-over). It sets each entry's start and end and returns the end of
// the last.
func Schedule(entries []api.PlanEntry, parallel int) float64 {
	parallel = max(parallel, 1)
	lanes := make([]float64, parallel)
	link, last := 0.0, 0.0
	for i := range entries {
		e := &entries[i]
		p := e.Prediction
		if !e.Migratable || p == nil || p.Strategy == api.StrategyCannotMove {
			continue
		}
		lane := 0
		for l := range lanes {
			if lanes[l] < lanes[lane] {
				lane = l
			}
		}
		e.StartSeconds = lanes[lane]
		transfer := max(p.Seconds-p.SetupSeconds, 0)
		begin := max(e.StartSeconds+p.SetupSeconds, link)
		e.EndSeconds = begin + transfer
		link, lanes[lane] = e.EndSeconds, e.EndSeconds
		last = max(last, e.EndSeconds)
	}
	return last
}
