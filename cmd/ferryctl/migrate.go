package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"time"

	"github.com/ferry-vm/ferry/migration"
)

// cmdMigrate starts a Ferry-driven migration and follows it like `watch
// NAME`, so the exit status says how it ended.
func cmdMigrate(ctx context.Context, c *client, g globals, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	var req migration.MigrateRequest
	var after time.Duration
	fs.StringVar(&req.Target, "to", "", "target node's proxy address HOST:PORT")
	fs.BoolVar(&req.PostCopy, "postcopy", false, "allow post-copy (switch with `ferryctl postcopy NAME`)")
	fs.DurationVar(&after, "postcopy-after", 0, "switch to post-copy this long after the start")
	fs.BoolVar(&req.AutoConverge, "auto-converge", false, "let QEMU throttle the guest's CPU so pre-copy converges")
	fs.IntVar(&req.BandwidthMiBs, "bandwidth-mibs", 0, "bandwidth cap in MiB/s (0: none)")
	fs.IntVar(&req.PostCopyBandwidthMiBs, "postcopy-bandwidth-mibs", 0, "bandwidth cap in MiB/s once in post-copy (0: none)")
	fs.IntVar(&req.Parallel, "parallel", 0, "parallel (multifd) connections for the memory stream")
	wait := fs.Bool("wait", true, "follow the migration until it ends")
	// Flags may come after the domain name, as operators type them.
	var name string
	rest := args
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			return usageError("migrate: " + err.Error())
		}
		if fs.NArg() == 0 {
			break
		}
		if name != "" {
			return usageError(fmt.Sprintf("migrate takes one domain name, got %q and %q", name, fs.Arg(0)))
		}
		name, rest = fs.Arg(0), fs.Args()[1:]
	}
	if name == "" || req.Target == "" {
		return usageError("usage: migrate NAME --to HOST:PORT [--postcopy] [--postcopy-after D] [--auto-converge] [--bandwidth-mibs N] [--parallel N]")
	}
	req.Domain = name
	req.PostCopyAfterSeconds = after.Seconds()
	body, _ := json.Marshal(req)
	var resp migration.MigrateResponse
	if err := c.postJSON(ctx, "/v1/migrations", body, &resp); err != nil {
		return err
	}
	if g.output == "table" {
		fmt.Fprintf(g.out, "%s: %s (migration %s)\n", name, resp.Message, resp.MigrationID)
	}
	if !*wait {
		if g.output == "json" {
			return printJSON(g.out, resp)
		}
		return nil
	}
	return followJob(ctx, c, g, name, resp.MigrationID)
}

// followJob shows the migration's progress until it ends. A migration that
// failed before the stream opened is caught by looking its job up once.
func followJob(ctx context.Context, c *client, g globals, name, id string) error {
	return watchJobs(ctx, c, g, name, func() *migration.Job {
		var j migration.Job
		if err := c.get(ctx, "/v1/jobs/"+url.PathEscape(name), nil, &j); err != nil {
			return nil
		}
		if j.Phase.Finished() && j.Proxy != nil && j.Proxy.MigrationID == id {
			return &j
		}
		return nil
	})
}

func cmdPostCopy(ctx context.Context, c *client, g globals, args []string) error {
	if len(args) != 1 || args[0] == "" {
		return usageError("postcopy needs exactly one domain name (usage: postcopy NAME)")
	}
	var res migration.AbortResult
	if err := c.post(ctx, "/v1/jobs/"+url.PathEscape(args[0])+"/postcopy", &res); err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(g.out, res)
	}
	fmt.Fprintf(g.out, "%s: %s\n", args[0], res.Message)
	return nil
}
