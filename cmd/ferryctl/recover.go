package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api"
)

// recoverCmd and giveUpCmd speak to the recovery of a paused post-copy
// (phase PostCopyPaused), which Ferry otherwise runs by itself.
func recoverCmd(g *globals) *cobra.Command {
	return recoveryCmd(g, "recover", "recover NAME",
		"try now to resume NAME's paused post-copy (run on the source node)",
		"recover has Ferry try at once to resume a Ferry-driven post-copy migration whose streams broke\n"+
			"(phase PostCopyPaused), instead of at its next backoff: say, once the link or the peer is back.\n"+
			"Ferry keeps trying by itself until --postcopy-recovery-timeout.")
}

func giveUpCmd(g *globals) *cobra.Command {
	return recoveryCmd(g, "give-up", "give-up NAME",
		"stop resuming NAME's paused post-copy and declare the guest lost (run on the source node)",
		"give-up ends the recovery of a Ferry-driven post-copy migration whose streams broke (phase\n"+
			"PostCopyPaused) now, rather than at --postcopy-recovery-timeout. The guest is declared lost:\n"+
			"its memory stays split between the two nodes, both copies held by libvirt, as after any\n"+
			"post-copy failure nobody resumes.")
}

func recoveryCmd(g *globals, verb, use, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:               use,
		Short:             short,
		Long:              long,
		Args:              exactlyOneDomain(use),
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			var res api.MessageResponse
			if err := g.client.postQuery(ctx, "/v1/jobs/"+url.PathEscape(args[0])+"/"+verb, g.domainQuery(), &res); err != nil {
				return err
			}
			return emit(g, res, func(bool) { fmt.Fprintln(g.out, res.Message) })
		}),
	}
}
