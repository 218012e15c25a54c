package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api"
)

// migrateUse names what every migration needs; its other flags are in
// --help and docs/ferryctl.md, never listed twice.
const migrateUse = "migrate NAME --to HOST:PORT --to-node NODE [flags]"

// migrateCmd starts a Ferry-driven migration and follows it like `watch
// NAME`, so the exit status says how it ended.
func migrateCmd(g *globals) *cobra.Command {
	var req api.MigrateRequest
	var after, deadline time.Duration
	var wait bool
	c := &cobra.Command{
		Use:   migrateUse,
		Short: "live-migrate NAME through Ferry's proxy to the target node's proxy address (run on the source node)",
		Long: "migrate starts a live migration of NAME through Ferry's proxy to the target node's proxy\n" +
			"address and shows its progress until it ends; the exit status is 0 only if it completed.\n\n" +
			"--to-node needs the proxy's TLS, since the target's proxy certificate must name that node; it is\n" +
			"required unless ferryd runs with --migration-allow-any-target.\n\n" +
			"--postcopy allows post-copy: then ferryctl postcopy NAME switches to it, and so do --policy act\n" +
			"and the migration's deadline.\n\n" +
			"--data-path proxy, the default, sends QEMU's stream through both nodes' Ferry proxies; direct\n" +
			"sends it from QEMU straight to the target's QEMU under QEMU's own TLS, for node pairs that list\n" +
			"each other in ferryd's --direct-peers, and needs --to-node and no post-copy.\n\n" +
			"--compression none is the default; zstd needs --parallel and does not go with post-copy; auto\n" +
			"lets ferryd choose channels and compression from the link, the guest's dirty rate and the idle\n" +
			"CPUs, and the job says why.\n\n" +
			"--deadline ends the migration by post-copy if allowed, else by an abort. It can only shorten\n" +
			"Ferry's own deadline (150s per GiB, at least 5m), and is 10s to 20h.",
		Args:              exactlyOneDomain(migrateUse),
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			name := args[0]
			if req.Target == "" {
				return usageError("migrate needs --to HOST:PORT, the target node's proxy address (usage: " + migrateUse + ")")
			}
			switch req.Policy {
			case "", "observe", "advise", "act":
			default:
				return usageError(fmt.Sprintf("--policy %q: want observe, advise or act", req.Policy))
			}
			req.Domain = name
			req.PostCopyAfterSeconds = after.Seconds()
			req.DeadlineSeconds = deadline.Seconds()
			// What the migration waits for before it starts goes to
			// stderr: -o json keeps stdout one document.
			queued := func(msg string) { fmt.Fprintf(g.errOut, "%s: %s\n", clean(name), clean(msg)) }
			resp, err := g.client.Migrate(ctx, req, queued)
			if err != nil {
				return err
			}
			if !g.structured() {
				fmt.Fprintf(g.out, "%s: %s (migration %s)\n", clean(name), clean(resp.Message), clean(resp.MigrationID))
			}
			if !wait {
				if g.structured() {
					return emit(g, resp, nil)
				}
				return nil
			}
			return followJob(ctx, g, name, resp.MigrationID)
		}),
	}
	f := c.Flags()
	f.StringVar(&req.Target, "to", "", "target node's proxy address HOST:PORT")
	f.StringVar(&req.TargetNode, "to-node", "", "the node the target must be: its proxy's certificate must name it")
	f.BoolVar(&req.PostCopy, "postcopy", false, "allow post-copy (switched to by ferryctl postcopy, the policy or the deadline)")
	f.DurationVar(&after, "postcopy-after", 0, "switch to post-copy this long after the migration's data starts moving")
	f.BoolVar(&req.AutoConverge, "auto-converge", false, "let QEMU throttle the guest's CPU so pre-copy converges")
	f.IntVar(&req.BandwidthMiBs, "bandwidth-mibs", 0, "bandwidth cap in MiB/s (0: none)")
	f.IntVar(&req.PostCopyBandwidthMiBs, "postcopy-bandwidth-mibs", 0, "bandwidth cap in MiB/s once in post-copy (0: none)")
	f.IntVar(&req.Parallel, "parallel", 0, "parallel (multifd) connections for the memory stream")
	f.StringVar(&req.Compression, "compression", "", "compression of the memory stream: none (default), zstd or auto")
	f.StringVar(&req.DataPath, "data-path", "", "the data path: proxy (default), through both nodes' proxies, or direct, QEMU straight to QEMU")
	f.StringVar(&req.Policy, "policy", "", "convergence policy for this migration: observe, advise or act (default: ferryd's --policy)")
	f.Uint64Var(&req.MaxDowntimeMs, "max-downtime-ms", 0, "longest guest pause in ms a policy switch-over may cost; can only lower ferryd's --max-downtime-ms")
	// Its first name, kept for scripts that use it.
	f.Uint64Var(&req.MaxDowntimeMs, "max-downtime", 0, "")
	f.MarkDeprecated("max-downtime", "use --max-downtime-ms, as ferryd names it")
	f.DurationVar(&deadline, "deadline", 0, "end the migration this long after its data starts moving; can only shorten Ferry's own")
	f.BoolVar(&wait, "wait", true, "follow the migration until it ends")
	c.RegisterFlagCompletionFunc("policy", cobra.FixedCompletions([]string{"observe", "advise", "act"}, cobra.ShellCompDirectiveNoFileComp))
	c.RegisterFlagCompletionFunc("data-path", cobra.FixedCompletions([]string{"proxy", "direct"}, cobra.ShellCompDirectiveNoFileComp))
	c.RegisterFlagCompletionFunc("compression", cobra.FixedCompletions([]string{"none", "zstd", "auto"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

// followJob shows the migration's progress until it ends. A migration that
// failed before the stream opened is caught by looking its job up once.
func followJob(ctx context.Context, g *globals, name, id string) error {
	return watchJobs(ctx, g, name, func() *api.Job {
		j, err := g.client.Job(ctx, name)
		if err != nil {
			return nil
		}
		if j.Phase.Finished() && j.Proxy != nil && j.Proxy.MigrationID == id {
			return &j
		}
		return nil
	})
}

func postCopyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "postcopy NAME",
		Short:             "switch NAME's running migration to post-copy",
		Args:              exactlyOneDomain("postcopy NAME"),
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			res, err := g.client.PostCopy(ctx, args[0])
			if err != nil {
				return err
			}
			return emit(g, res, func(bool) { fmt.Fprintf(g.out, "%s: %s\n", clean(args[0]), clean(res.Message)) })
		}),
	}
}
