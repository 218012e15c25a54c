package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
)

// evacuations runs one evacuation of this node at a time and keeps the
// last one's account.
type evacuations struct {
	mu   sync.Mutex
	last *api.Evacuation
	// predicted is the last plan's evacuation time, once there is one.
	predicted float64
	planned   bool
}

// evacuationWait bounds one migration of an evacuation: its slot, its
// target's inbound slot and the migration itself.
const evacuationWait = 6 * time.Hour

// startEvacuation answers POST /v1/evacuations: it plans, and runs the
// plan in the background; GET /v1/evacuation follows it.
func (d *Daemon) startEvacuation(w http.ResponseWriter, r *http.Request) {
	if d.source == nil {
		writeError(w, http.StatusConflict, "this ferryd runs without a migration proxy (--proxy-listen is empty): it moves nothing")
		return
	}
	var req api.PlanRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "evacuation request is not valid JSON: "+err.Error())
		return
	}
	if len(req.Targets) == 0 {
		writeError(w, http.StatusBadRequest, "an evacuation needs at least one target node (ferryctl evacuate --to NODE[,NODE...])")
		return
	}
	if err := validPlanRequest(req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	d.evac.mu.Lock()
	if d.evac.last != nil && d.evac.last.Running {
		d.evac.mu.Unlock()
		writeError(w, http.StatusConflict, "an evacuation of this node is under way (GET /v1/evacuation, ferryctl evacuate --follow)")
		return
	}
	// Held against a second start while this one plans.
	d.evac.last = &api.Evacuation{Running: true, Started: time.Now(), Plan: api.Plan{Node: d.cfg.NodeName, Targets: req.Targets}}
	d.evac.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	p, err := d.buildPlan(ctx, req)
	cancel()
	if err != nil {
		d.evac.mu.Lock()
		d.evac.last = nil
		d.evac.mu.Unlock()
		writePlanError(w, err)
		return
	}
	ev := &api.Evacuation{Plan: p, Running: true, Started: time.Now()}
	d.evac.mu.Lock()
	d.evac.last = ev
	snapshot := d.evacSnapshot()
	d.evac.mu.Unlock()
	d.log.Info("evacuation started", zap.Strings("targets", req.Targets), zap.Int("domains", len(p.Entries)), zap.Int("cannotMove", p.CannotMove),
		zap.Float64("predictedSeconds", p.PredictedSeconds), zap.Bool("dryRun", req.DryRun))
	go d.runEvacuation(ev, req.DryRun)
	writeJSON(w, http.StatusAccepted, snapshot)
}

// getEvacuation answers GET /v1/evacuation: the one under way, or the last.
func (d *Daemon) getEvacuation(w http.ResponseWriter, _ *http.Request) {
	d.evac.mu.Lock()
	defer d.evac.mu.Unlock()
	if d.evac.last == nil {
		writeError(w, http.StatusNotFound, "no evacuation of this node since ferryd started")
		return
	}
	writeJSON(w, http.StatusOK, d.evacSnapshot())
}

// evacSnapshot copies the evacuation; d.evac.mu is held.
func (d *Daemon) evacSnapshot() api.Evacuation {
	v := *d.evac.last
	v.Entries = append([]api.PlanEntry(nil), v.Entries...)
	return v
}

// setEntry changes entry i of ev under the lock.
func (d *Daemon) setEntry(ev *api.Evacuation, i int, f func(*api.PlanEntry)) {
	d.evac.mu.Lock()
	defer d.evac.mu.Unlock()
	f(&ev.Entries[i])
}

// runEvacuation moves the plan's domains in its order, as many at once as
// it allows; the source's slots and the link's sharing are the node's
// scheduler's. A dry run checks each against its target instead.
func (d *Daemon) runEvacuation(ev *api.Evacuation, dryRun bool) {
	d.evac.mu.Lock()
	entries := slices.Clone(ev.Entries)
	sem := make(chan struct{}, max(ev.Parallel, 1))
	d.evac.mu.Unlock()
	var wg sync.WaitGroup
	for i, e := range entries {
		if e.Target == "" {
			d.setEntry(ev, i, func(e *api.PlanEntry) { e.State = "skipped" })
			continue
		}
		d.setEntry(ev, i, func(e *api.PlanEntry) { e.State = "waiting" })
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if dryRun {
				d.dryRunEntry(ev, i, e)
				return
			}
			d.evacuateEntry(ev, i, e)
		}()
	}
	wg.Wait()
	d.evac.mu.Lock()
	defer d.evac.mu.Unlock()
	ev.Running, ev.RealSeconds = false, time.Since(ev.Started).Seconds()
	for _, e := range ev.Entries {
		switch e.State {
		case "moved":
			ev.Moved++
		case "failed":
			ev.Failed++
		}
	}
	d.log.Info("evacuation ended", zap.Int("moved", ev.Moved), zap.Int("failed", ev.Failed), zap.Int("cannotMove", ev.CannotMove),
		zap.Float64("realSeconds", ev.RealSeconds), zap.Float64("predictedSeconds", ev.PredictedSeconds))
}

func (d *Daemon) dryRunEntry(ev *api.Evacuation, i int, e api.PlanEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dr, err := d.source.DryRun(ctx, d.evacRequest(e))
	d.setEntry(ev, i, func(e *api.PlanEntry) {
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

// evacRequest is the migration of a plan's entry to its target. One
// predicted to need post-copy is started with it allowed: the node's
// policy switches it once it stalls, or its deadline does.
func (d *Daemon) evacRequest(e api.PlanEntry) drive.MigrateRequest {
	req := drive.MigrateRequest{Domain: e.Domain, Socket: e.Socket, Target: d.cfg.Peers[e.Target], TargetNode: e.Target}
	if p := e.Prediction; p != nil && p.Strategy == api.StrategyPostCopy {
		req.PostCopy = true
	}
	return req
}

// evacuateEntry migrates one domain and waits for its end.
func (d *Daemon) evacuateEntry(ev *api.Evacuation, i int, e api.PlanEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), evacuationWait)
	defer cancel()
	start := time.Now()
	d.setEntry(ev, i, func(e *api.PlanEntry) { e.State = "migrating" })
	resp, err := d.source.Start(ctx, d.evacRequest(e))
	if err == nil {
		err = d.waitMigration(ctx, e, resp.MigrationID, start)
	}
	d.setEntry(ev, i, func(e *api.PlanEntry) {
		e.RealSeconds = time.Since(start).Seconds()
		if err != nil {
			e.State, e.Error = "failed", err.Error()
			return
		}
		e.State = "moved"
	})
	if err != nil {
		d.log.Warn("evacuation: a domain did not move", zap.String("domain", e.Domain), zap.String("target", e.Target), zap.Error(err))
	}
}

// waitMigration waits for the driven migration id of e to end, and says
// how it ended unless it completed.
func (d *Daemon) waitMigration(ctx context.Context, e api.PlanEntry, id string, since time.Time) error {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		j, err := d.Tracker.JobByName(e.Socket, e.Domain)
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
