package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
)

func jobsCmd(g *globals) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "jobs [--all]",
		Short: "in-flight migration jobs (--all adds finished ones)",
		Args:  noArgs,
		RunE: runE(func(ctx context.Context, _ []string) error {
			resp, err := g.client.Jobs(ctx, all)
			if err != nil {
				return err
			}
			if resp.Jobs == nil {
				resp.Jobs = []api.Job{}
			}
			return emit(g, resp.Jobs, func(wide bool) { printJobs(g.out, resp.Jobs, wide) })
		}),
	}
	c.Flags().BoolVar(&all, "all", false, "include finished jobs")
	return c
}

func jobCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "job NAME",
		Short:             "one domain's latest job with its iterations and events",
		Args:              exactlyOneDomain("job NAME"),
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			j, err := g.client.Job(ctx, args[0])
			if err != nil {
				return err
			}
			return emit(g, j, func(bool) { printJob(g.out, j) })
		}),
	}
}

func domainsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "domains",
		Short: "domains on this node, their states and what needs attention",
		Args:  noArgs,
		RunE: runE(func(ctx context.Context, _ []string) error {
			// With whether each can move: ferryd reads each one's XML.
			resp, err := g.client.Domains(ctx, true)
			if err != nil {
				return err
			}
			return emit(g, resp, func(wide bool) { printDomains(g.out, resp.Node, resp.Domains, resp.Libvirt, wide) })
		}),
	}
}

// completeDomains offers the node's domain names, asking ferryd briefly;
// an unreachable ferryd offers nothing rather than file names.
func completeDomains(g *globals) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// Not g.client: it is made before completion parses the command
		// line's flags, --socket among them.
		resp, err := client.New(g.socket).Domains(ctx, false)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names := make([]cobra.Completion, 0, len(resp.Domains))
		for _, d := range resp.Domains {
			// A name that needs escaping could not be typed as offered,
			// and the shell would print it raw.
			if clean(d.Name) == d.Name {
				names = append(names, cobra.CompletionWithDesc(d.Name, clean(d.State)))
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func proxyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "proxy",
		Short: "the migration proxy: TLS or plain, incoming migrations prepared on this node",
		Args:  noArgs,
		RunE: runE(func(ctx context.Context, _ []string) error {
			resp, err := g.client.Proxy(ctx)
			if err != nil {
				return err
			}
			return emit(g, resp, func(bool) { printProxy(g, resp) })
		}),
	}
}

func printProxy(g *globals, resp api.ProxyResponse) {
	if !resp.Enabled {
		fmt.Fprintln(g.out, "migration proxy: off (ferryd runs without --proxy-listen)")
		return
	}
	mode := "mutual TLS"
	if !resp.TLS {
		mode = "plain TCP with splice (trusted migration network)"
	}
	fmt.Fprintf(g.out, "migration proxy: %s, sockets in %s\n", mode, clean(resp.SocketDir))
	if len(resp.Registered) == 0 {
		fmt.Fprintln(g.out, "no incoming migrations prepared")
		return
	}
	tw := table(g.out)
	fmt.Fprintln(tw, "MIGRATION\tDOMAIN\tSTATE\tSTREAMS\tPEER NODE\tEXPIRES")
	for _, m := range resp.Registered {
		streams := make([]string, 0, len(m.Targets))
		for k := range m.Targets {
			streams = append(streams, fmt.Sprintf("%s(%d)", clean(k), m.Limits[k]))
		}
		sort.Strings(streams)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", clean(m.ID), clean(m.Domain), clean(m.State), strings.Join(streams, ","), dash(clean(m.PeerNode)), m.Expires.Format(time.RFC3339))
	}
	tw.Flush()
}
