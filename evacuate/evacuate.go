// Package evacuate owns the evacuation of a node. A Checker tells what
// keeps a domain here (preflight's blockers, its disks' storage and
// sizes). A Planner checks every domain, has the meter measure it and plan
// predict its migration (for a VMI, with what KubeVirt will apply: the
// plan is its advice), and orders them over the slots and the link. A
// Runner moves the plan's domains in its order, as many at once as it
// allows, each to its target, or checks them against it in a dry run; and
// it keeps the last one's account for whoever follows it. The source's
// slots and the link's sharing stay the driver's scheduler's.
//
// What it reads of libvirt, the tracker and the meter comes through the
// interfaces it declares, which daemon/ wires; daemon/ serves the routes.
package evacuate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
)

// Mover is what moves a domain: the driver's source side (*drive.Source).
type Mover interface {
	Start(ctx context.Context, req drive.MigrateRequest) (drive.MigrateResponse, error)
	DryRun(ctx context.Context, req drive.MigrateRequest) (api.DryRun, error)
}

// Jobs reads the node's latest job of a domain (the tracker's JobByName).
type Jobs func(socket, domain string) (api.Job, error)

// Runner runs one evacuation of this node at a time and keeps the last
// one's account, and the last plan's prediction.
type Runner struct {
	move  Mover
	jobs  Jobs
	peers map[string]string // node name -> proxy address
	log   *zap.Logger

	mu   sync.Mutex
	last *api.Evacuation
	// predicted is the last plan's evacuation time, once there is one.
	predicted float64
	planned   bool
}

// NewRunner returns a Runner moving domains with move to the proxy
// addresses peers names.
func NewRunner(move Mover, jobs Jobs, peers map[string]string, log *zap.Logger) *Runner {
	return &Runner{move: move, jobs: jobs, peers: peers, log: log}
}

// Wait bounds one migration of an evacuation: its slot, its target's
// inbound slot and the migration itself.
const Wait = 6 * time.Hour

// ErrRunning: an evacuation of this node is under way.
var ErrRunning = errors.New("an evacuation of this node is under way (GET /v1/evacuation, ferryctl evacuate --follow)")

// Hold marks an evacuation as starting, while its plan is made, so that no
// second one starts meanwhile; release gives the hold back if the plan
// fails.
func (r *Runner) Hold(node string, targets []string) (release func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil && r.last.Running {
		return nil, ErrRunning
	}
	held := &api.Evacuation{Running: true, Started: time.Now(), Plan: api.Plan{Node: node, Targets: targets}}
	r.last = held
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.last == held {
			r.last = nil
		}
	}, nil
}

// Start runs plan p in the background (a dry run checks each domain
// instead) and returns the evacuation as it starts.
func (r *Runner) Start(p api.Plan, dryRun bool) api.Evacuation {
	ev := &api.Evacuation{Plan: p, Running: true, Started: time.Now()}
	r.mu.Lock()
	r.last = ev
	snapshot := r.snapshot()
	r.mu.Unlock()
	r.log.Info("evacuation started", zap.Strings("targets", p.Targets), zap.Int("domains", len(p.Entries)), zap.Int("cannotMove", p.CannotMove),
		zap.Float64("predictedSeconds", p.PredictedSeconds), zap.Bool("dryRun", dryRun))
	go r.run(ev, dryRun)
	return snapshot
}

// Last is the evacuation under way, or the last one; ok is false when
// there was none.
func (r *Runner) Last() (api.Evacuation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return api.Evacuation{}, false
	}
	return r.snapshot(), true
}

// Planned records a plan's prediction, for /metrics.
func (r *Runner) Planned(seconds float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.predicted, r.planned = seconds, true
}

// LastPlanSeconds is the last plan's predicted evacuation time.
func (r *Runner) LastPlanSeconds() (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.predicted, r.planned
}

// snapshot copies the evacuation; r.mu is held.
func (r *Runner) snapshot() api.Evacuation {
	v := *r.last
	v.Entries = append([]api.PlanEntry(nil), v.Entries...)
	return v
}

// setEntry changes entry i of ev under the lock.
func (r *Runner) setEntry(ev *api.Evacuation, i int, f func(*api.PlanEntry)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&ev.Entries[i])
}

// run moves the plan's domains in its order, as many at once as it
// allows. A dry run checks each against its target instead.
func (r *Runner) run(ev *api.Evacuation, dryRun bool) {
	r.mu.Lock()
	entries := slices.Clone(ev.Entries)
	sem := make(chan struct{}, max(ev.Parallel, 1))
	r.mu.Unlock()
	var wg sync.WaitGroup
	for i, e := range entries {
		if e.Target == "" {
			r.setEntry(ev, i, func(e *api.PlanEntry) { e.State = "skipped" })
			continue
		}
		r.setEntry(ev, i, func(e *api.PlanEntry) { e.State = "waiting" })
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if dryRun {
				r.dryRunEntry(ev, i, e)
				return
			}
			r.moveEntry(ev, i, e)
		}()
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	ev.Running, ev.RealSeconds = false, time.Since(ev.Started).Seconds()
	for _, e := range ev.Entries {
		switch e.State {
		case "moved":
			ev.Moved++
		case "failed":
			ev.Failed++
		}
	}
	r.log.Info("evacuation ended", zap.Int("moved", ev.Moved), zap.Int("failed", ev.Failed), zap.Int("cannotMove", ev.CannotMove),
		zap.Float64("realSeconds", ev.RealSeconds), zap.Float64("predictedSeconds", ev.PredictedSeconds))
}

func (r *Runner) dryRunEntry(ev *api.Evacuation, i int, e api.PlanEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dr, err := r.move.DryRun(ctx, r.request(e))
	r.setEntry(ev, i, func(e *api.PlanEntry) {
		switch {
		case err != nil:
			e.State, e.Error = "failed", err.Error()
		case !dr.OK:
			e.State, e.DryRun, e.Error = "failed", &dr, dr.Error
		default:
			e.State, e.DryRun = "checked", &dr
		}
	})
}

// request is the migration of a plan's entry to its target. One predicted
// to need post-copy is started with it allowed: the node's policy switches
// it once it stalls, or its deadline does.
func (r *Runner) request(e api.PlanEntry) drive.MigrateRequest {
	req := drive.MigrateRequest{Domain: e.Domain, Socket: e.Socket, Target: r.peers[e.Target], TargetNode: e.Target}
	if p := e.Prediction; p != nil && p.Strategy == api.StrategyPostCopy {
		req.PostCopy = true
	}
	return req
}

// moveEntry migrates one domain and waits for its end.
func (r *Runner) moveEntry(ev *api.Evacuation, i int, e api.PlanEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	start := time.Now()
	r.setEntry(ev, i, func(e *api.PlanEntry) { e.State = "migrating" })
	resp, err := r.move.Start(ctx, r.request(e))
	if err == nil {
		err = r.wait(ctx, e, resp.MigrationID)
	}
	r.setEntry(ev, i, func(e *api.PlanEntry) {
		e.RealSeconds = time.Since(start).Seconds()
		if err != nil {
			e.State, e.Error = "failed", err.Error()
			return
		}
		e.State = "moved"
	})
	if err != nil {
		r.log.Warn("evacuation: a domain did not move", zap.String("domain", e.Domain), zap.String("target", e.Target), zap.Error(err))
	}
}

// wait waits for the driven migration id of e to end, and says how it
// ended unless it completed.
func (r *Runner) wait(ctx context.Context, e api.PlanEntry, id string) error {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		j, err := r.jobs(e.Socket, e.Domain)
		if err == nil && j.Proxy != nil && j.Proxy.MigrationID == id && j.Phase.Finished() {
			if j.Phase != api.PhaseCompleted {
				return fmt.Errorf("migration %s ended %s: %s", id, j.Phase, j.FailureReason)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("still migrating when the evacuation stopped waiting")
		case <-t.C:
		}
	}
}
