package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/url"
	"time"

	"github.com/ferry-vm/ferry/migration"
)

// cmdAbort requests the abort, then follows the job until it ends (or 60 s),
// so the operator sees the outcome, not just that a request was sent. A
// post-copy abort refused for want of --force comes back as ferryd's 409
// and ends with status 1: the command was right, the answer is no.
func cmdAbort(ctx context.Context, c *client, g globals, args []string) error {
	fs := flag.NewFlagSet("abort", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	force := fs.Bool("force", false, "in post-copy, pause the migration anyway")
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return usageError("abort: " + err.Error() + " (usage: abort NAME [--force])")
	}
	if len(names) != 1 || names[0] == "" {
		return usageError("abort needs exactly one domain name (usage: abort NAME [--force])")
	}
	name := names[0]
	q := url.Values{}
	if *force {
		q.Set("force", "1")
	}
	var res migration.AbortResult
	if err := c.postQuery(ctx, "/v1/jobs/"+url.PathEscape(name)+"/abort", q, &res); err != nil {
		return err
	}
	if g.output == "table" {
		fmt.Fprintf(g.out, "%s: %s\n", name, res.Message)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var j migration.Job
		if err := c.get(ctx, "/v1/jobs/"+url.PathEscape(name), nil, &j); err != nil {
			return err
		}
		if j.Phase.Finished() {
			if g.output == "json" {
				return printJSON(g.out, j)
			}
			fmt.Fprintf(g.out, "abort %s\n%s\n", j.AbortStatus, summaryLine(j))
			if j.AbortStatus != migration.AbortSucceeded {
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

// parseInterleaved parses flags placed before, between or after the
// positional arguments, as operators type them, and returns the latter.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
