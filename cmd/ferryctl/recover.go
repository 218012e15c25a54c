package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
)

// recoverCmd and giveUpCmd speak to the recovery of a paused post-copy
// (phase PostCopyPaused), which Ferry otherwise runs by itself.
func recoverCmd(g *globals) *cobra.Command {
	return recoveryCmd(g, (*client.Client).Recover, "recover NAME",
		"try now to resume NAME's paused post-copy, or again one given up (run on the source node)",
		"recover has Ferry try at once to resume a Ferry-driven post-copy migration whose streams broke\n"+
			"(phase PostCopyPaused), instead of at its next backoff: say, once the link or the peer is back.\n"+
			"Ferry keeps trying by itself, past --postcopy-recovery-timeout too (it then alerts), until the\n"+
			"migration resumes or an operator gives up. On a recovery given up whose guest is still held\n"+
			"paused in post-copy on this node, recover starts it again.")
}

func giveUpCmd(g *globals) *cobra.Command {
	return recoveryCmd(g, (*client.Client).GiveUp, "give-up NAME",
		"stop resuming NAME's paused post-copy and declare the guest lost (on the source; then on the target)",
		"give-up ends the recovery of a Ferry-driven post-copy migration whose streams broke (phase\n"+
			"PostCopyPaused): Ferry never gives it up by itself. The guest is declared lost: its memory\n"+
			"stays split between the two nodes, both copies held by libvirt, as after any post-copy\n"+
			"failure nobody resumes. On the source it stops the attempts (ferryctl recover starts them\n"+
			"again while the guest is held); on the target it ends the job this node shows as paused.")
}

// word is what the operator says to a recovery, Recover or GiveUp: a
// method, as g.client is made only once the command runs.
type word func(c *client.Client, ctx context.Context, domain string) (api.MessageResponse, error)

func recoveryCmd(g *globals, say word, use, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:               use,
		Short:             short,
		Long:              long,
		Args:              exactlyOneDomain(use),
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			res, err := say(g.client, ctx, args[0])
			if err != nil {
				return err
			}
			return emit(g, res, func(bool) { fmt.Fprintln(g.out, clean(res.Message)) })
		}),
	}
}
