package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/units"
)

const planUse = "plan [--to NODE[,NODE...]] [--parallel N] [--bandwidth-mibs N]"

// planCmd prints how this node's domains would leave it, without moving
// anything.
func planCmd(g *globals) *cobra.Command {
	var req api.PlanRequest
	var to string
	c := &cobra.Command{
		Use:   planUse,
		Short: "how this node's domains would leave it: what cannot move and why, the order, and how long it takes",
		Long: "plan checks every running domain, measures its dirty rate if it has none recent, predicts its\n" +
			"migration (outcome, passes, time, downtime, strategy) and lays them out over the node's slots\n" +
			"and link, as `ferryctl evacuate` would run them. Nothing moves. The exit status is 0 only if\n" +
			"every domain can move. The link's bandwidth is --bandwidth-mibs, else ferryd's\n" +
			"--migration-bandwidth-mibs, else learned from the last migrations.",
		Args: noArgs,
		RunE: runE(func(ctx context.Context, _ []string) error {
			req.Targets = splitNodes(to)
			p, err := g.client.Plan(ctx, req)
			if err != nil {
				return err
			}
			if err := emit(g, p, func(wide bool) { printPlan(g.out, p, nil, wide) }); err != nil {
				return err
			}
			if p.CannotMove > 0 {
				return notMigratable{fmt.Sprintf("%d of the node's domains", p.CannotMove)}
			}
			return nil
		}),
	}
	planFlags(c, &to, &req)
	return c
}

func planFlags(c *cobra.Command, to *string, req *api.PlanRequest) {
	f := c.Flags()
	f.StringVar(to, "to", "", "target nodes, by name (ferryd --peer gives their addresses); domains go to them in turn")
	f.IntVar(&req.Parallel, "parallel", 0, "migrations at once (default: ferryd's --outbound-migrations)")
	f.IntVar(&req.BandwidthMiBs, "bandwidth-mibs", 0, "the link's bandwidth in MiB/s (default: ferryd's --migration-bandwidth-mibs, else learned)")
}

func splitNodes(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// printPlan prints a plan, and with ev the evacuation's account of it.
func printPlan(w io.Writer, p api.Plan, ev *api.Evacuation, wide bool) {
	fmt.Fprintf(w, "node %s: %d domains, %d cannot move; %d at once over %s/s (%s); setup %.1fs (%s); max downtime %dms, post-copy %s\n",
		clean(p.Node), len(p.Entries), p.CannotMove, p.Parallel, units.IEC(p.BandwidthBytesPerSecond), clean(p.BandwidthFrom), p.SetupSeconds, clean(p.SetupFrom),
		p.MaxDowntimeMs, allowed(p.AllowPostCopy))
	tw := table(w)
	head := "ORDER\tDOMAIN\tTARGET\tSTRATEGY\tMEMORY\tDIRTY/s\tPASSES\tPREDICTED"
	if ev != nil {
		head += "\tSTATE\tREAL"
	}
	if wide {
		head += "\tPLANNED\tWHY"
	}
	fmt.Fprintln(tw, head)
	for _, e := range p.Entries {
		strategy, mem, dirty, passes, predicted := "cannot-move", "-", "-", "-", "-"
		why, target := e.Error, dash(e.Target)
		if len(e.Blockers) > 0 {
			why = e.Blockers[0].Code + ": " + e.Blockers[0].Message
		}
		if e.Mover == api.MoverKubeVirt {
			// KubeVirt chooses the node and moves it.
			target = "(kubevirt)"
		}
		if b := e.DrainBlock; b != nil {
			why = "blocks a drain (" + b.EvictionStrategy + ", " + b.Reason + "): " + b.Message
		}
		if pr := e.Prediction; pr != nil {
			strategy, mem, dirty = pr.Strategy, units.IEC(pr.MemoryBytes), units.IEC(pr.DirtyBytesPerSecond)
			if pr.Strategy != "cannot-move" {
				passes, predicted = strconv.Itoa(pr.Passes), fmt.Sprintf("%.1fs", pr.Seconds)
			}
			if why == "" {
				why = pr.Reason
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", e.Order, clean(e.Domain), clean(target), clean(strategy), mem, dirty, passes, predicted)
		if ev != nil {
			real := "-"
			if e.RealSeconds > 0 {
				real = fmt.Sprintf("%.1fs", e.RealSeconds)
			}
			fmt.Fprintf(tw, "\t%s\t%s", dash(clean(e.State)), real)
		}
		if wide {
			fmt.Fprintf(tw, "\t%.1f-%.1fs\t%s", e.StartSeconds, e.EndSeconds, clean(why))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintf(w, "predicted evacuation: %.1fs\n", p.PredictedSeconds)
	for _, e := range p.Entries {
		if b := e.DrainBlock; b != nil {
			fmt.Fprintf(w, "%s would block a drain: KubeVirt refuses its eviction (%s, %s): %s\n", clean(e.Domain), clean(b.EvictionStrategy), clean(b.Reason), clean(b.Message))
		}
		if k := e.KubeVirt; k != nil && wide {
			fmt.Fprintf(w, "%s: KubeVirt applies %s%s: post-copy %s, workload disruption %s, max downtime %dms, bandwidth %s/s, %ds/GiB\n", clean(e.Domain), clean(k.Source),
				clean(policyOf(k.Policy)), allowed(k.AllowPostCopy), allowed(k.AllowWorkloadDisruption), k.MaxDowntimeMs, units.IEC(k.BandwidthBytesPerSecond), k.CompletionTimeoutPerGiB)
		}
	}
	if ev != nil && !ev.Running {
		fmt.Fprintf(w, "real: %.1fs (%.2f of the plan); %d moved, %d failed, %d cannot move\n",
			ev.RealSeconds, ev.RealSeconds/max(p.PredictedSeconds, 0.001), ev.Moved, ev.Failed, p.CannotMove)
	}
	for _, e := range p.Entries {
		if e.Error != "" && e.State == "failed" {
			fmt.Fprintf(w, "%s: %s\n", clean(e.Domain), clean(e.Error))
		}
	}
}

func policyOf(name string) string {
	if name == "" {
		return ""
	}
	return " (MigrationPolicy " + name + ")"
}

func allowed(b bool) string {
	if b {
		return "allowed"
	}
	return "not allowed"
}

const evacuateUse = "evacuate --to NODE[,NODE...] [--parallel N] [--bandwidth-mibs N] [--dry-run]"

// evacuateCmd moves every domain it can off this node and follows it.
func evacuateCmd(g *globals) *cobra.Command {
	var req api.PlanRequest
	var to string
	c := &cobra.Command{
		Use:   evacuateUse,
		Short: "move every domain off this node to the target nodes in the plan's order, then report",
		Long: "evacuate plans as `ferryctl plan` does, then migrates each domain that can move through the node's\n" +
			"scheduler (its slots, the link shared by nearness to switch-over) under the node's policy, and\n" +
			"ends with a report: what moved, what could not and why, and predicted against real time. With\n" +
			"--dry-run each domain is checked against its target instead (ferryctl check --to). The exit\n" +
			"status is 0 only if the node was emptied (or, with --dry-run, would be).",
		Args: noArgs,
		RunE: runE(func(ctx context.Context, _ []string) error {
			req.Targets = splitNodes(to)
			if len(req.Targets) == 0 {
				return usageError("evacuate needs --to NODE[,NODE...] (usage: " + evacuateUse + ")")
			}
			ev, err := g.client.Evacuate(ctx, req)
			if err != nil {
				return err
			}
			seen := map[string]string{}
			for ev.Running {
				if !g.structured() {
					for _, e := range ev.Entries {
						if seen[e.Domain] != e.State {
							seen[e.Domain] = e.State
							fmt.Fprintf(g.out, "%s %s: %s%s\n", time.Now().Format("15:04:05"), clean(e.Domain), clean(e.State), realOf(e))
						}
					}
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
				if ev, err = g.client.Evacuation(ctx); err != nil {
					return err
				}
			}
			if err := emit(g, ev, func(wide bool) { printPlan(g.out, ev.Plan, &ev, wide) }); err != nil {
				return err
			}
			if ev.Failed > 0 || ev.CannotMove > 0 {
				return notMigratable{fmt.Sprintf("%d of the node's domains", ev.Failed+ev.CannotMove)}
			}
			return nil
		}),
	}
	planFlags(c, &to, &req)
	c.Flags().BoolVar(&req.DryRun, "dry-run", false, "check each domain against its target with a dry run, move nothing")
	return c
}

func realOf(e api.PlanEntry) string {
	if e.RealSeconds == 0 {
		return ""
	}
	s := fmt.Sprintf(" in %.1fs", e.RealSeconds)
	if e.Prediction != nil && e.Prediction.Seconds > 0 {
		s += fmt.Sprintf(" (predicted %.1fs)", e.Prediction.Seconds)
	}
	if e.Error != "" {
		s += ": " + clean(e.Error)
	}
	return s
}
