package migration

import (
	"time"

	"github.com/ferry-vm/ferry/api"
)

// iteration is a pass as the tracker keeps it: whether its figures were
// read at its start, and its size.
type iteration struct {
	api.Iteration
	sampled bool
	// largest is the most memory left seen in the pass: its size.
	largest uint64
}

// iterationsView copies the passes as the job shows them.
func iterationsView(its []iteration) []api.Iteration {
	out := make([]api.Iteration, len(its))
	for i, it := range its {
		out[i] = it.Iteration
	}
	return out
}

// startIteration opens iteration n (and closes the previous one).
func (t *Tracker) startIteration(j *job, n uint64, tm time.Time) {
	if k := len(j.iters); k > 0 {
		last := &j.iters[k-1]
		if last.Number >= n {
			return
		}
		if last.End == nil {
			last.End = &tm
		}
	}
	j.iters = append(j.iters, iteration{Iteration: api.Iteration{Number: n, Start: tm}})
	// The new pass's size is known from its first reading.
	j.view.PassBytes, j.view.PassPercent = 0, 0
	if len(j.iters) > t.cfg.MaxIterations {
		j.iters = append(j.iters[:0], j.iters[len(j.iters)-t.cfg.MaxIterations:]...)
	}
	if n > j.view.Iteration {
		j.view.Iteration = n
	}
}
