package main

import "time"

// monitor is KubeVirt's classic migration monitor (virt-launcher's
// live-migration-source.go) as its behaviour is documented: progress is
// data remaining falling below its lowest reading so far; no progress for
// progressTimeout aborts; past the completion deadline (completionTimeoutPerGiB
// x GiB of data) it switches to post-copy when allowed and aborts otherwise.
// After post-copy starts it watches nothing.
type monitor struct {
	deadline        time.Duration
	progressTimeout time.Duration
	postCopy        bool

	seen  bool
	low   uint64
	lowAt time.Duration
	done  bool
}

// move is what the monitor does after a reading.
type move int

const (
	keep move = iota
	switchPostCopy
	abortDeadline
	abortNoProgress
)

func (m move) String() string {
	return [...]string{"keep", "post-copy at the deadline", "abort at the deadline", "abort: no progress"}[m]
}

// kubevirtProgressTimeout is KubeVirt's default progressTimeout.
const kubevirtProgressTimeout = 150 * time.Second

func newMonitor(deadline time.Duration, postCopy bool) *monitor {
	return &monitor{deadline: deadline, progressTimeout: kubevirtProgressTimeout, postCopy: postCopy}
}

// observe takes one reading of the running job, elapsed since the
// migration started, and returns what to do; at most one move other than
// keep over the monitor's life.
func (m *monitor) observe(elapsed time.Duration, remaining uint64) move {
	if m.done {
		return keep
	}
	if !m.seen || remaining < m.low {
		m.seen, m.low, m.lowAt = true, remaining, elapsed
	}
	switch {
	case elapsed-m.lowAt > m.progressTimeout:
		m.done = true
		return abortNoProgress
	case elapsed > m.deadline:
		m.done = true
		if m.postCopy {
			return switchPostCopy
		}
		return abortDeadline
	}
	return keep
}

// completionDeadline is KubeVirt's acceptable completion time for a guest
// of that much memory (no disks are migrated on the bed).
func completionDeadline(memoryMiB int, perGiB time.Duration) time.Duration {
	return time.Duration(float64(memoryMiB) / 1024 * float64(perGiB))
}
