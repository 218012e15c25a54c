package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/units"
)

const checkUse = "check NAME [--to HOST:PORT --to-node NODE] [--postcopy] [--data-path proxy|direct]"

// notMigratable is check's exit status 1: the domain would not move.
type notMigratable struct{ name string }

func (e notMigratable) Error() string { return e.name + " cannot be migrated" }

// checkCmd says whether a domain can move, and with --to asks the target
// through a dry run.
func checkCmd(g *globals) *cobra.Command {
	var req api.DryRunRequest
	c := &cobra.Command{
		Use:   checkUse,
		Short: "say whether NAME can be live-migrated, and why not; --to asks the target through a dry run",
		Long: "check reads NAME's live definition for what keeps it on this node (host devices, local disks,\n" +
			"shared memory, a CPU tied to this host...). With --to it also runs the migration protocol up to\n" +
			"the target's prepare, where the target's libvirt starts the guest ready to receive it and stops it\n" +
			"again: no memory is sent. The exit status is 0 only if NAME can move. With --data-path direct the\n" +
			"target prepares its QEMU to listen under QEMU's own TLS.",
		Args:              exactlyOneDomain(checkUse),
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			name := args[0]
			var resp api.CheckResponse
			var err error
			if req.Target == "" {
				if req.TargetNode != "" || req.PostCopy || req.DataPath != "" {
					return usageError("--to-node, --postcopy and --data-path go with --to HOST:PORT (usage: " + checkUse + ")")
				}
				resp, err = g.client.Check(ctx, name)
			} else {
				resp, err = g.client.DryRun(ctx, name, req)
			}
			if err != nil {
				return err
			}
			if resp.Blockers == nil {
				resp.Blockers = []api.Blocker{}
			}
			if err := emit(g, resp, func(bool) { printCheck(g.out, resp) }); err != nil {
				return err
			}
			if !resp.Migratable {
				return notMigratable{name}
			}
			return nil
		}),
	}
	f := c.Flags()
	f.StringVar(&req.Target, "to", "", "dry run to the target node's proxy address HOST:PORT")
	f.StringVar(&req.TargetNode, "to-node", "", "the node the target must be, by its proxy's certificate (as for migrate)")
	f.BoolVar(&req.PostCopy, "postcopy", false, "ask with post-copy allowed, as the migration would be")
	f.StringVar(&req.DataPath, "data-path", "", "ask for the data path the migration would take: proxy (default) or direct (needs --to-node)")
	c.RegisterFlagCompletionFunc("data-path", cobra.FixedCompletions([]string{"proxy", "direct"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

func printCheck(w io.Writer, r api.CheckResponse) {
	verdict := "can be migrated"
	if !r.Migratable {
		verdict = "cannot be migrated"
	}
	fmt.Fprintf(w, "%s on node %s %s\n", clean(r.Domain), clean(r.Node), verdict)
	if len(r.Blockers) > 0 {
		tw := table(w)
		fmt.Fprintln(tw, "  SEVERITY\tCODE\tDEVICE\tWHY")
		for _, b := range r.Blockers {
			dev := b.Device
			if b.SizeBytes > 0 {
				dev += " (" + units.IEC(b.SizeBytes) + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", clean(strings.ToUpper(string(b.Severity))), clean(b.Code), dash(clean(dev)), clean(b.Message))
		}
		tw.Flush()
	}
	if d := r.DryRun; d != nil {
		to := d.Target
		if d.TargetNode != "" {
			to = d.TargetNode + " (" + d.Target + ")"
		}
		if d.DataPath == "direct" {
			to += ", direct path"
		}
		if d.OK {
			fmt.Fprintf(w, "dry run to %s: the target would take it (CPU %s), in %dms\n", clean(to), clean(d.CPU), d.DurationMs)
		} else {
			fmt.Fprintf(w, "dry run to %s: refused at %s, in %dms: %s\n", clean(to), clean(d.Step), d.DurationMs, clean(d.Error))
		}
	}
}
