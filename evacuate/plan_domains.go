package evacuate

import (
	"context"
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/peertext"
	"github.com/ferry-vm/ferry/plan"
)

// domainPlanBase is a domain's time in a plan besides its dirty-rate
// sample: its live XML, its disks' sizes and storage, and the measurement's
// calls. On a KubeVirt node each domain's libvirt is a pod's, which may
// answer some calls never: the time is the domain's own, so that one pod
// cannot spend the whole plan's.
const domainPlanBase = 30 * time.Second

// domainPlanWait bounds what a plan asks about one domain.
func (p *Planner) domainPlanWait() time.Duration {
	return domainPlanBase + p.cfg.DirtyRate.Sample
}

// planEntries plans the running domains a few at a time (measured as the
// meter measures them), each within its own time. Whatever one domain
// leaves unanswered is said in its entry, and the others are planned all
// the same; should the plan's own time run out, the domains not planned
// yet are entered as such, and the plan still answers for the node.
func (p *Planner) planEntries(ctx context.Context, kc *kubeVirtContext, doms []api.Domain, path plan.Path, limits plan.Limits) []api.PlanEntry {
	type planned struct {
		i int
		e api.PlanEntry
	}
	// Buffered for every domain: a late one never blocks once the plan
	// has stopped collecting.
	results := make(chan planned, len(doms))
	sem := make(chan struct{}, max(p.cfg.DirtyRate.Concurrent, 1))
	for i, dom := range doms {
		go func() {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
				results <- planned{i, p.planDomain(ctx, kc, dom, path, limits)}
			case <-ctx.Done():
			}
		}()
	}
	entries := make([]api.PlanEntry, len(doms))
	got := make([]bool, len(doms))
	for range doms {
		select {
		case r := <-results:
			entries[r.i], got[r.i] = r.e, true
		case <-ctx.Done():
			return p.unplanned(entries, got, doms)
		}
	}
	return entries
}

// planDomain is planEntry within the domain's own time.
func (p *Planner) planDomain(ctx context.Context, kc *kubeVirtContext, dom api.Domain, path plan.Path, limits plan.Limits) api.PlanEntry {
	ctx, cancel := context.WithTimeout(ctx, p.domainPlanWait())
	defer cancel()
	return p.planEntry(ctx, kc, dom, path, limits)
}

// unplanned fills in the entries of the domains the plan's time ran out on.
func (p *Planner) unplanned(entries []api.PlanEntry, got []bool, doms []api.Domain) []api.PlanEntry {
	for i, dom := range doms {
		if !got[i] {
			entries[i] = p.newEntry(dom)
			entries[i].Error = fmt.Sprintf("not measured: the plan's time ran out before domain %q (%s) was checked and measured", dom.Name, dom.Socket)
		}
	}
	return entries
}

// newEntry is a domain's entry before anything is asked of its libvirt.
func (p *Planner) newEntry(dom api.Domain) api.PlanEntry {
	e := api.PlanEntry{Domain: dom.Name, Socket: dom.Socket, State: "planned", Mover: api.MoverFerry}
	if p.checks.cfg.Libvirt.Launcher(dom.Socket) {
		// A launcher's domain is KubeVirt's to move, and its socket a
		// pod's: Ferry never drives it, whatever it reports.
		e.Mover = api.MoverKubeVirt
	}
	return e
}

// maxEntryError bounds an entry's error text.
const maxEntryError = 512

// entryError is what an entry says of a step that failed: which question
// the domain's libvirt left unanswered in time, or else its error.
func (p *Planner) entryError(ctx context.Context, dom api.Domain, step string, err error) string {
	if p.checks.cfg.Libvirt.TimedOut(err) || ctx.Err() != nil {
		return p.notAnswered(dom, step)
	}
	// A launcher's libvirt is a pod's: its words are quoted, and bounded.
	return peertext.Quote(err.Error(), maxEntryError)
}

// notAnswered says the domain is not measured, and what of it did not
// answer. The domain's name is a pod's word, hence quoted.
func (p *Planner) notAnswered(dom api.Domain, what string) string {
	return fmt.Sprintf("not measured: the libvirt of domain %q (%s) did not answer %s in time (%v a call, %v a domain)",
		dom.Name, dom.Socket, what, p.cfg.CallTimeout, p.domainPlanWait())
}
