package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/metrics"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
	"github.com/ferry-vm/ferry/plan"
)

// maxEntryError bounds an entry's error text.
const maxEntryError = 512

// errBadPlan is a plan request that names what cannot be planned.
var errBadPlan = errors.New("bad plan request")

// getPlan answers GET /v1/plan?to=NODE,NODE&parallel=N&bandwidthMiBs=N.
func (d *Daemon) getPlan(w http.ResponseWriter, r *http.Request) {
	req, err := planRequestOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	p, err := d.buildPlan(ctx, req)
	if err != nil {
		writePlanError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func writePlanError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	if errors.Is(err, errBadPlan) {
		code = http.StatusBadRequest
	}
	writeError(w, code, err.Error())
}

func planRequestOf(r *http.Request) (api.PlanRequest, error) {
	q := r.URL.Query()
	var req api.PlanRequest
	for _, t := range strings.Split(q.Get("to"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			req.Targets = append(req.Targets, t)
		}
	}
	for name, v := range map[string]*int{"parallel": &req.Parallel, "bandwidthMiBs": &req.BandwidthMiBs} {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return req, fmt.Errorf("%s %q is not a count", name, s)
			}
			*v = n
		}
	}
	return req, validPlanRequest(req)
}

// maxParallel bounds a plan's migrations at once: each is a lane of the
// plan and a goroutine of an evacuation.
const maxParallel = 64

func validPlanRequest(req api.PlanRequest) error {
	if req.Parallel < 0 || req.Parallel > maxParallel || req.BandwidthMiBs < 0 || len(req.Targets) > maxParallel {
		return fmt.Errorf("%w: parallel %d (0 to %d), bandwidthMiBs %d (not negative), %d targets (at most %d)",
			errBadPlan, req.Parallel, maxParallel, req.BandwidthMiBs, len(req.Targets), maxParallel)
	}
	return nil
}

// buildPlan predicts how each domain of this node would move, orders
// them and lays them out over the slots and the link.
func (d *Daemon) buildPlan(ctx context.Context, req api.PlanRequest) (api.Plan, error) {
	for _, t := range req.Targets {
		if _, ok := d.cfg.Peers[t]; !ok {
			return api.Plan{}, fmt.Errorf("%w: node %s: this ferryd knows no proxy address for it (ferryd --peer %s=HOST:PORT)", errBadPlan, t, t)
		}
		if t == d.cfg.NodeName {
			return api.Plan{}, fmt.Errorf("%w: node %s is this node", errBadPlan, t)
		}
	}
	// No more at once than the node's scheduler gives.
	slotsMax := max(d.cfg.OutboundSlots, 1)
	if req.Parallel == 0 || req.Parallel > slotsMax {
		req.Parallel = slotsMax
	}
	p := api.Plan{Node: d.cfg.NodeName, Targets: req.Targets, Parallel: req.Parallel, Entries: []api.PlanEntry{}}
	path := d.learnPath(req, &p)
	limits := plan.Limits{MaxDowntime: migration.DefaultMaxDowntime}
	if d.cfg.Policy.Mode == policy.Act {
		limits = plan.Limits{MaxDowntime: d.cfg.Policy.MaxDowntime, AllowPostCopy: d.cfg.Policy.AllowPostCopy}
	}
	p.MaxDowntimeMs, p.AllowPostCopy = uint64(limits.MaxDowntime/time.Millisecond), limits.AllowPostCopy

	var doms []api.Domain
	var stopped []api.PlanEntry
	for _, dom := range d.Tracker.Domains() {
		if dom.State == libvirtx.StateRunning.String() {
			doms = append(doms, dom)
			continue
		}
		// A paused guest (one a failed migration left, say) is not moved
		// live, and the node is not empty while it is here.
		stopped = append(stopped, api.PlanEntry{Domain: dom.Name, Socket: dom.Socket, Mover: api.MoverFerry, State: "planned",
			Error: fmt.Sprintf("%s (%s): only a running guest is live-migrated; resume it or move it by hand", dom.State, dom.Reason)})
	}
	kc := d.readKubeVirtContext(ctx)
	entries := append(d.planEntries(ctx, kc, doms, path, limits), stopped...)
	plan.Order(entries, req.Targets)
	p.PredictedSeconds = plan.Schedule(entries, req.Parallel)
	for _, e := range entries {
		if !e.Migratable || e.Prediction != nil && e.Prediction.Strategy == api.StrategyCannotMove {
			p.CannotMove++
		}
		if e.DrainBlock != nil {
			p.DrainBlocked++
		}
	}
	p.Entries = entries
	d.evac.Planned(p.PredictedSeconds)
	return p, nil
}

// lastPlanSeconds is the last plan's predicted evacuation, for /metrics.
func (d *Daemon) lastPlanSeconds() (float64, bool) {
	return d.evac.LastPlanSeconds()
}

// slotUse is the node's slots for the migrations Ferry drives, for /metrics.
func (d *Daemon) slotUse() []metrics.SlotUse {
	var out []metrics.SlotUse
	if d.source != nil {
		st := d.source.SlotStatus()
		out = append(out, metrics.SlotUse{Direction: "outbound", Max: st.Max, Used: st.Used, Queued: st.Queued, Hung: st.Hung})
	}
	if d.Proxy != nil {
		max, used := d.Proxy.InboundSlots()
		out = append(out, metrics.SlotUse{Direction: "inbound", Max: max, Used: used})
	}
	return out
}

// planEntry checks one domain and predicts its migration. A VMI's is
// advice, made with what KubeVirt will apply (kc: the cluster's
// configuration), not with this node's policy.
func (d *Daemon) planEntry(ctx context.Context, kc *kubeVirtContext, dom api.Domain, path plan.Path, limits plan.Limits) api.PlanEntry {
	e := d.newEntry(dom)
	check, unsized, err := d.inspectDomain(ctx, dom.Socket, dom.Name, false)
	if err != nil {
		e.Error = d.entryError(ctx, dom, "its live XML", err)
		return e
	}
	e.Blockers = check.Blockers
	if unsized != "" {
		// What it holds is half known: it is not taken to move.
		e.Error = d.notAnswered(dom, fmt.Sprintf("block info (the size) of disk %q", unsized))
		return e
	}
	e.Migratable = check.Migratable
	if e.Mover == api.MoverKubeVirt && kc != nil {
		l, cap, err := d.kubeVirtAdvice(ctx, kc, dom, &e)
		if err != nil {
			e.Error = err.Error()
			return e
		}
		limits = l
		if cap > 0 && (path.BandwidthBytesPerSecond == 0 || cap < path.BandwidthBytesPerSecond) {
			path.BandwidthBytesPerSecond = cap
		}
	}
	if !e.Migratable {
		return e
	}
	if d.meter == nil {
		e.Error = "the dirty rate is not measured here (ferryd --dirty-rate-period 0): no prediction"
		return e
	}
	if _, err := d.meter.Measure(ctx, dom.Socket, dom.Name, d.cfg.DirtyRate.Period); err != nil {
		e.Error = d.entryError(ctx, dom, "the dirty-rate measurement", err)
		return e
	}
	one := []api.Domain{dom}
	d.meter.Annotate(one)
	g := plan.Guest{MemoryBytes: one[0].MemoryBytes, ResidentBytes: one[0].ResidentBytes, DirtyBytesPerSecond: one[0].DirtyBytesPerSecond}
	pr := plan.Predict(g, path, limits)
	e.Prediction = &pr
	return e
}

// learnPath is the link's bandwidth and a migration's setup: given, or
// ferryd's flag, or what the last migrations this node drove to the
// targets took.
func (d *Daemon) learnPath(req api.PlanRequest, p *api.Plan) plan.Path {
	given, from := uint64(req.BandwidthMiBs)<<20, "given"
	if req.BandwidthMiBs <= 0 {
		given, from = uint64(max(d.cfg.LinkBandwidthMiBs, 0))<<20, "ferryd --migration-bandwidth-mibs"
	}
	l := plan.Learn(d.Tracker.Jobs(true), req.Targets, given, from)
	p.BandwidthBytesPerSecond, p.SetupSeconds = l.Path.BandwidthBytesPerSecond, l.Path.Setup.Seconds()
	p.BandwidthFrom, p.SetupFrom = l.BandwidthFrom, l.SetupFrom
	if p.BandwidthFrom == "" {
		p.BandwidthFrom = "unknown: give --bandwidth-mibs, set ferryd --migration-bandwidth-mibs, or migrate over the path once"
	}
	return l.Path
}
