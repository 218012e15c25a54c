package policy

import (
	"fmt"
	"math"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/units"
	"github.com/ferry-vm/ferry/migration"
)

// Action is what a decision does to the migration.
type Action string

const (
	None Action = "none"
	// RaiseDowntime is one step of the downtime ramp, taken while a
	// migration is slow rather than stuck.
	RaiseDowntime Action = "raise-downtime"
	// SwitchOver raises libvirt's max downtime to what the switch-over
	// needs at the lowest point the passes reach; QEMU then stops the guest
	// and copies the rest at its next sync.
	SwitchOver Action = "switch-over"
	PostCopy   Action = "post-copy"
	Abort      Action = "abort"
)

// Decision is one step the policy takes (or, advising, would take), with
// the figures it was taken on.
type Decision struct {
	Action    Action
	Iteration uint64
	// MaxDowntime is what to set libvirt's max downtime to, in whole
	// milliseconds as libvirt takes it.
	MaxDowntime time.Duration
	// Trigger is why the policy looked: stalled, diverging, deadline-near
	// or deadline.
	Trigger string
	Reason  string
}

// Evidence is what a decision is made from: the tracker's record of the
// job and two facts only the migration's driver knows.
type Evidence struct {
	Job api.Job
	// MaxDowntime is libvirt's current setting for the migration.
	MaxDowntime time.Duration
	// Deadline, when set, is the backstop the migration's driver enforces
	// itself; the policy's own applies otherwise.
	Deadline time.Duration
	// PostCopyEnabled: the migration was started with VIR_MIGRATE_POSTCOPY,
	// without which it cannot switch.
	PostCopyEnabled bool
	// DeadlineOwned: the migration's driver itself switches or aborts at
	// Deadline (a migration Ferry drives, through its owner); the policy
	// only ramps the downtime as it nears.
	DeadlineOwned bool
}

// Memory is what the policy remembers of one job between decisions.
type Memory struct {
	// Iteration is the last pass a decision was made at: one per pass.
	Iteration uint64 `json:"iteration"`
	// Raised counts downtime steps taken.
	Raised int `json:"raised"`
	// Final is set once the policy switched to post-copy or aborted.
	Final Action `json:"final,omitempty"`
}

const (
	// headroom over the computed need: QEMU measures the bandwidth of its
	// own last pass, which differs from the tracker's reading.
	headroom = 1.1
	// minWindow passes are searched for the low point; an older one may
	// come from a phase of the guest that has passed.
	minWindow = 5
	// A ramp step at most doubles the downtime, and the ramp reaches the
	// cap in rampSteps steps from libvirt's default.
	rampSteps = 5
	// deadlineNear is the share of the backstop after which a slow but
	// converging migration gets ramp steps.
	deadlineNear = 0.8
	// nearCap (percent): a need this close over the cap gets one pass at
	// the cap before post-copy or an abort.
	nearCap = 125
	// maxThrottle is QEMU's default cap on auto-converge's throttle
	// (cpu-throttle-tailslow off, max-cpu-throttle 99 %).
	maxThrottle = 99
)

// Decide is called at each new pass of a pre-copy job; it returns None
// when there is nothing to do and at most one decision per pass. Decisions
// are taken on pass starts (what each pass left dirty), never on polls
// inside a pass, where remaining data always falls.
func Decide(s Settings, e Evidence, m *Memory) Decision {
	j := e.Job
	d := Decision{Action: None, Iteration: j.Iteration}
	if m.Final != "" || j.Mode == api.ModePostCopy || j.Phase.Finished() || j.Role != api.RoleSource {
		return d
	}
	if j.Iteration <= m.Iteration || j.AbortStatus != "" {
		return d
	}
	// A pass is judged by what it started with: until a reading of this
	// pass is in, the figures are the previous pass's end, the lowest of
	// it, and would flatter it.
	if n := len(j.Iterations); n == 0 || j.Iterations[n-1].Number != j.Iteration || j.Iterations[n-1].MemoryRemainingBytes == 0 {
		return d
	}
	m.Iteration = j.Iteration

	cur := e.MaxDowntime
	if cur <= 0 {
		cur = migration.DefaultMaxDowntime
	}
	limit := s.MaxDowntime
	deadline := Deadline(s, j.DataTotalBytes)
	if e.Deadline > 0 {
		deadline = e.Deadline
	}
	elapsed := time.Duration(j.ElapsedMs) * time.Millisecond

	switch {
	case deadline > 0 && elapsed >= deadline && !e.DeadlineOwned:
		d.Trigger = "deadline"
	case j.Convergence == api.VerdictStalled:
		d.Trigger = "stalled"
	case j.Convergence == api.VerdictDiverging:
		d.Trigger = "diverging"
	case deadline > 0 && float64(elapsed) >= deadlineNear*float64(deadline):
		d.Trigger = "deadline-near"
	default:
		return d
	}

	// Auto-converge is still raising its throttle: QEMU is steering, and
	// the next pass may converge. The backstop still stands.
	if t := j.AutoConvergeThrottle; t > 0 && t < maxThrottle && d.Trigger != "deadline" {
		d.Trigger = ""
		return d
	}
	low, lowOK := lowPoint(j.Iterations)
	transfer := j.TransferRateBytesPerSecond
	if transfer == 0 {
		// Nothing moving is the link's trouble, not the guest's: a switch
		// to post-copy now would stall the guest on every page it lacks,
		// and an abort would be on no figures. Wait for the next pass.
		d.Trigger, d.Reason = "", ""
		return d
	}
	figures := fmt.Sprintf("dirty %s/s vs transfer %s/s, %s left at this pass's start",
		units.IEC(j.DirtyRateBytesPerSecond), units.IEC(transfer), units.IEC(passStart(j)))
	if lowOK {
		figures += fmt.Sprintf(", low point %s over the last %d passes", units.IEC(low), minWindow)
	}
	if deadline > 0 {
		figures += fmt.Sprintf("; %s of a %s backstop used", elapsed.Round(time.Second), deadline.Round(time.Second))
	}

	var need time.Duration
	if lowOK && transfer > 0 {
		need = time.Duration(float64(low) / float64(transfer) * headroom * float64(time.Second)).Round(time.Millisecond)
	}
	fits := need > 0 && need <= limit

	if d.Trigger == "deadline-near" {
		if next := rampStep(cur, limit); next > cur {
			d.Action, d.MaxDowntime = RaiseDowntime, wholeMs(next)
			d.Reason = fmt.Sprintf("%s; ramp step %d: max downtime %v -> %v (cap %v)", figures, m.Raised+1, cur, next, limit)
			m.Raised++
		}
		return d
	}

	if fits && need > cur {
		d.Action, d.MaxDowntime = SwitchOver, wholeMs(need)
		d.Reason = fmt.Sprintf("%s; a switch-over at the low point needs %v (cap %v), max downtime %v -> %v",
			figures, need, limit, cur, need)
		m.Raised++
		return d
	}
	if fits && m.Raised > 0 && cur < limit {
		// The downtime set last pass should have sufficed and QEMU went
		// on: its own bandwidth reading is lower than ours. One more step.
		next := min(limit, cur*2)
		d.Action, d.MaxDowntime = RaiseDowntime, wholeMs(next)
		d.Reason = fmt.Sprintf("%s; max downtime %v did not bring the switch-over, %v -> %v (cap %v)", figures, cur, cur, next, limit)
		m.Raised++
		return d
	}
	if fits && m.Raised == 0 {
		// libvirt's setting already covers the low point: QEMU switches
		// over by itself when a pass ends there.
		return d
	}

	if need > limit && need <= limit*nearCap/100 && cur < limit && m.Raised == 0 {
		// Just over the cap: the low point is one reading, and QEMU's own
		// bandwidth may be higher than ours. One pass at the cap before
		// giving up costs a pass, not the migration.
		d.Action, d.MaxDowntime = RaiseDowntime, wholeMs(limit)
		d.Reason = fmt.Sprintf("%s; a switch-over needs %v, just over the %v cap: one pass at the cap, max downtime %v -> %v",
			figures, need, limit, cur, limit)
		m.Raised++
		return d
	}
	why := fmt.Sprintf("a switch-over needs %v, over the %v cap", need.Round(time.Millisecond), limit)
	if need == 0 {
		why = "no pass after the first has been read, so no low point to switch over at"
	}
	if s.AllowPostCopy && e.PostCopyEnabled && j.Iteration >= 2 {
		d.Action, m.Final = PostCopy, PostCopy
		d.Reason = fmt.Sprintf("%s; %s: post-copy (first pass done)", figures, why)
		return d
	}
	d.Action, m.Final = Abort, Abort
	pc := "post-copy not allowed"
	switch {
	case s.AllowPostCopy && !e.PostCopyEnabled:
		pc = "post-copy allowed but the migration was not started with it"
	case s.AllowPostCopy:
		pc = "post-copy only after the first full pass"
	}
	d.Reason = fmt.Sprintf("%s; %s; %s", figures, why, pc)
	return d
}

// lowPoint is the least memory a recent pass (from the second on) started
// with: the remaining data a switch-over would copy if QEMU stopped the
// guest when a pass ends as low as one did before.
func lowPoint(iters []api.Iteration) (uint64, bool) {
	var low uint64
	ok := false
	n := 0
	for i := len(iters) - 1; i >= 0 && n < minWindow; i-- {
		it := iters[i]
		if it.Number < 2 || it.MemoryRemainingBytes == 0 {
			continue
		}
		n++
		if !ok || it.MemoryRemainingBytes < low {
			low, ok = it.MemoryRemainingBytes, true
		}
	}
	return low, ok
}

func passStart(j api.Job) uint64 {
	if n := len(j.Iterations); n > 0 && j.Iterations[n-1].MemoryRemainingBytes > 0 {
		return j.Iterations[n-1].MemoryRemainingBytes
	}
	return j.MemoryRemainingBytes
}

// rampStep is the next downtime of a geometric ramp from libvirt's default
// to the cap in rampSteps steps.
func rampStep(cur, limit time.Duration) time.Duration {
	if cur >= limit {
		return cur
	}
	base := migration.DefaultMaxDowntime
	if limit <= base {
		return limit
	}
	f := math.Pow(float64(limit)/float64(base), 1/float64(rampSteps))
	next := time.Duration(float64(cur) * f).Round(time.Millisecond)
	if next <= cur {
		next = cur + time.Millisecond
	}
	return min(limit, next)
}

// wholeMs rounds d up to the whole milliseconds libvirt takes: a
// switch-over's need is never set short.
func wholeMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}
