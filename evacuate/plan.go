package evacuate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/measure"
	"github.com/ferry-vm/ferry/plan"
)

// Tracker lists the node's domains and the jobs it has seen (the
// tracker's).
type Tracker interface {
	Domains() []api.Domain
	Jobs(all bool) []api.Job
}

// Meter measures the domains' dirty rates (*measure.Meter).
type Meter interface {
	Measure(ctx context.Context, socket, domain string, maxAge time.Duration) (api.DirtyRate, error)
	Annotate(doms []api.Domain)
}

// PlanConfig is what a Planner is given: the node's settings, and what it
// reads.
type PlanConfig struct {
	// Node is this node's name; Peers the other nodes' proxy addresses,
	// by node name: a plan's targets are among them.
	Node  string
	Peers map[string]string
	// OutboundSlots is the node's scheduler's: a plan moves no more at
	// once.
	OutboundSlots int
	// LinkBandwidthMiBs is the link's bandwidth as ferryd was told it
	// (ferryd --migration-bandwidth-mibs), 0 if not.
	LinkBandwidthMiBs int
	// Limits are what the node's policy allows a migration Ferry drives.
	Limits plan.Limits
	// DirtyRate is how the meter measures; CallTimeout bounds a libvirt
	// call (its caller sets libvirtx's default). A plan waits for them,
	// and says so when they run out.
	DirtyRate   measure.Config
	CallTimeout time.Duration
	Tracker     Tracker
	// Meter is nil when dirty rates are not measured: no prediction then.
	Meter Meter
	// Cluster reads KubeVirt's objects for VMIs' advice; nil without an
	// API server.
	Cluster dynamic.Interface
}

// Planner makes the plans of this node's evacuations.
type Planner struct {
	cfg    PlanConfig
	checks *Checker
	runner *Runner
}

// NewPlanner returns a Planner checking domains with checks, which tells
// runner each plan's prediction.
func NewPlanner(cfg PlanConfig, checks *Checker, runner *Runner) *Planner {
	return &Planner{cfg: cfg, checks: checks, runner: runner}
}

// ErrBadPlan is a plan request that names what cannot be planned.
var ErrBadPlan = errors.New("bad plan request")

// maxParallel bounds a plan's migrations at once: each is a lane of the
// plan and a goroutine of an evacuation.
const maxParallel = 64

// ValidRequest says what of a plan request is out of bounds (ErrBadPlan).
func ValidRequest(req api.PlanRequest) error {
	if req.Parallel < 0 || req.Parallel > maxParallel || req.BandwidthMiBs < 0 || len(req.Targets) > maxParallel {
		return fmt.Errorf("%w: parallel %d (0 to %d), bandwidthMiBs %d (not negative), %d targets (at most %d)",
			ErrBadPlan, req.Parallel, maxParallel, req.BandwidthMiBs, len(req.Targets), maxParallel)
	}
	return nil
}

// Plan predicts how each domain of this node would move, orders them and
// lays them out over the slots and the link.
func (p *Planner) Plan(ctx context.Context, req api.PlanRequest) (api.Plan, error) {
	for _, t := range req.Targets {
		if _, ok := p.cfg.Peers[t]; !ok {
			return api.Plan{}, fmt.Errorf("%w: node %s: this ferryd knows no proxy address for it (ferryd --peer %s=HOST:PORT)", ErrBadPlan, t, t)
		}
		if t == p.cfg.Node {
			return api.Plan{}, fmt.Errorf("%w: node %s is this node", ErrBadPlan, t)
		}
	}
	// No more at once than the node's scheduler gives.
	slotsMax := max(p.cfg.OutboundSlots, 1)
	if req.Parallel == 0 || req.Parallel > slotsMax {
		req.Parallel = slotsMax
	}
	out := api.Plan{Node: p.cfg.Node, Targets: req.Targets, Parallel: req.Parallel, Entries: []api.PlanEntry{}}
	path := p.learnPath(req, &out)
	limits := p.cfg.Limits
	out.MaxDowntimeMs, out.AllowPostCopy = uint64(limits.MaxDowntime/time.Millisecond), limits.AllowPostCopy

	var doms []api.Domain
	var stopped []api.PlanEntry
	for _, dom := range p.cfg.Tracker.Domains() {
		if dom.State == running {
			doms = append(doms, dom)
			continue
		}
		// A paused guest (one a failed migration left, say) is not moved
		// live, and the node is not empty while it is here.
		stopped = append(stopped, api.PlanEntry{Domain: dom.Name, Socket: dom.Socket, Mover: api.MoverFerry, State: "planned",
			Error: fmt.Sprintf("%s (%s): only a running guest is live-migrated; resume it or move it by hand", dom.State, dom.Reason)})
	}
	kc := readKubeVirtContext(ctx, p.cfg.Cluster)
	entries := append(p.planEntries(ctx, kc, doms, path, limits), stopped...)
	plan.Order(entries, req.Targets)
	out.PredictedSeconds = plan.Schedule(entries, req.Parallel)
	for _, e := range entries {
		if !e.Migratable || e.Prediction != nil && e.Prediction.Strategy == api.StrategyCannotMove {
			out.CannotMove++
		}
		if e.DrainBlock != nil {
			out.DrainBlocked++
		}
	}
	out.Entries = entries
	p.runner.Planned(out.PredictedSeconds)
	return out, nil
}

// planEntry checks one domain and predicts its migration. A VMI's is
// advice, made with what KubeVirt will apply (kc: the cluster's
// configuration), not with this node's policy.
func (p *Planner) planEntry(ctx context.Context, kc *kubeVirtContext, dom api.Domain, path plan.Path, limits plan.Limits) api.PlanEntry {
	e := p.newEntry(dom)
	check, unsized, err := p.checks.inspect(ctx, dom.Socket, dom.Name, false)
	if err != nil {
		e.Error = p.entryError(ctx, dom, "its live XML", err)
		return e
	}
	e.Blockers = check.Blockers
	if unsized != "" {
		// What it holds is half known: it is not taken to move.
		e.Error = p.notAnswered(dom, fmt.Sprintf("block info (the size) of disk %q", unsized))
		return e
	}
	e.Migratable = check.Migratable
	if e.Mover == api.MoverKubeVirt && kc != nil {
		l, cap, err := kubeVirtAdvice(ctx, kc, dom, &e)
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
	if p.cfg.Meter == nil {
		e.Error = "the dirty rate is not measured here (ferryd --dirty-rate-period 0): no prediction"
		return e
	}
	if _, err := p.cfg.Meter.Measure(ctx, dom.Socket, dom.Name, p.cfg.DirtyRate.Period); err != nil {
		e.Error = p.entryError(ctx, dom, "the dirty-rate measurement", err)
		return e
	}
	one := []api.Domain{dom}
	p.cfg.Meter.Annotate(one)
	g := plan.Guest{MemoryBytes: one[0].MemoryBytes, ResidentBytes: one[0].ResidentBytes, DirtyBytesPerSecond: one[0].DirtyBytesPerSecond}
	pr := plan.Predict(g, path, limits)
	e.Prediction = &pr
	return e
}

// learnPath is the link's bandwidth and a migration's setup: given, or
// ferryd's flag, or what the last migrations this node drove to the
// targets took.
func (p *Planner) learnPath(req api.PlanRequest, out *api.Plan) plan.Path {
	given, from := uint64(req.BandwidthMiBs)<<20, "given"
	if req.BandwidthMiBs <= 0 {
		given, from = uint64(max(p.cfg.LinkBandwidthMiBs, 0))<<20, "ferryd --migration-bandwidth-mibs"
	}
	l := plan.Learn(p.cfg.Tracker.Jobs(true), req.Targets, given, from)
	out.BandwidthBytesPerSecond, out.SetupSeconds = l.Path.BandwidthBytesPerSecond, l.Path.Setup.Seconds()
	out.BandwidthFrom, out.SetupFrom = l.BandwidthFrom, l.SetupFrom
	if out.BandwidthFrom == "" {
		out.BandwidthFrom = "unknown: give --bandwidth-mibs, set ferryd --migration-bandwidth-mibs, or migrate over the path once"
	}
	return l.Path
}
