package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api"
)

// abortCmd requests the abort, then follows the job until it ends (or 60 s),
// so the operator sees the outcome, not just that a request was sent. A
// post-copy abort refused for want of --force comes back as ferryd's 409
// and ends with status 1: the command was right, the answer is no.
func abortCmd(g *globals) *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "abort NAME [--force]",
		Short: "abort NAME's migration (run on the source node) and wait for the outcome",
		Long: "abort cancels NAME's migration and waits for the outcome; pre-copy is cancelled and the guest\n" +
			"stays on the source. In post-copy an abort can only pause the migration, stopping the guest on\n" +
			"both nodes with its memory split between them: without --force ferryctl says so and exits 1,\n" +
			"with --force it pauses it.",
		Args:              exactlyOneDomain("abort NAME [--force]"),
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			return abort(ctx, g, args[0], force)
		}),
	}
	c.Flags().BoolVar(&force, "force", false, "in post-copy, pause the migration anyway")
	return c
}

func abort(ctx context.Context, g *globals, name string, force bool) error {
	res, err := g.client.Abort(ctx, name, force)
	if err != nil {
		return err
	}
	if !g.structured() {
		fmt.Fprintf(g.out, "%s: %s\n", clean(name), clean(res.Message))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		j, err := g.client.Job(ctx, name)
		if err != nil {
			return err
		}
		if j.Phase.Finished() {
			if g.structured() {
				if err := emit(g, j, nil); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(g.out, "abort %s\n%s\n", clean(string(j.AbortStatus)), summaryLine(j))
			}
			if j.AbortStatus != api.AbortSucceeded {
				return failedJob{j.Phase}
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's migration has not ended 60s after the abort (abortStatus %s, phase %s)", name, j.AbortStatus, j.Phase)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
