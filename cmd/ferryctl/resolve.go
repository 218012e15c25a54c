package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api/client"
)

// resolveCmd ends a migration in doubt by the operator's word. It is the
// one command that may leave a guest on two nodes if the word is wrong,
// so it takes no default.
func resolveCmd(g *globals) *cobra.Command {
	var keep string
	c := &cobra.Command{
		Use:   "resolve NAME --keep source|target",
		Short: "settle NAME's migration in doubt (run on the source node): keep the source's copy or the target's",
		Long: "resolve ends a Ferry-driven migration whose target never said whether the guest runs there\n" +
			"(phase InDoubt). --keep source resumes the copy paused here: first make sure the target's copy\n" +
			"is gone (virsh list there, or the node fenced). --keep target ends the copy here: the guest\n" +
			"runs on the target. Ferry settles such a migration itself once the target answers.",
		Args:              exactlyOneDomain("resolve NAME --keep source|target"),
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			if keep != "source" && keep != "target" {
				return usageError(fmt.Sprintf("resolve %s: --keep %q: say which copy to keep, --keep source or --keep target", args[0], keep))
			}
			res, err := g.client.Resolve(ctx, args[0], client.Keep(keep))
			if err != nil {
				return err
			}
			return emit(g, res, func(bool) { fmt.Fprintln(g.out, clean(res.Message)) })
		}),
	}
	c.Flags().StringVar(&keep, "keep", "", "which copy to keep: source or target (required)")
	c.RegisterFlagCompletionFunc("keep", cobra.FixedCompletions([]string{"source", "target"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}
