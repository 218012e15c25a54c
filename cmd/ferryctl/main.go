// Command ferryctl reads a node's ferryd over its debug socket: migration
// jobs, their evidence, live progress, and the node's domains.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-vm/ferry/internal/version"
	"github.com/ferry-vm/ferry/migration"
)

const usage = `ferryctl reads ferryd on this node.

Usage:
  ferryctl [--socket PATH] [-o table|json] COMMAND [ARGS]

Commands:
  jobs [--all]     in-flight migration jobs (--all adds finished ones)
  job NAME         one domain's latest job with its iterations and events
  watch [NAME]     live progress of jobs (of NAME only, exiting when it ends)
  domains          domains on this node, their states and what needs attention
  migrate NAME --to HOST:PORT [--postcopy] [--postcopy-after D] [--auto-converge]
                   [--bandwidth-mibs N] [--parallel N]
                   live-migrate NAME through Ferry's proxy to the target node's proxy
                   address, showing progress until it ends (run on the source node)
  abort NAME [--force]
                   abort NAME's migration (run on the source node) and wait for the outcome;
                   pre-copy is cancelled and the guest stays on the source. In post-copy an
                   abort can only pause the migration, stopping the guest on both nodes with
                   its memory split between them: without --force ferryctl says so and exits 1,
                   with --force it pauses it
  proxy            the migration proxy: TLS or plain, incoming migrations prepared on this node
  postcopy NAME    switch NAME's running migration to post-copy
  version          ferryctl's version

Flags:
  --socket PATH    ferryd debug socket (env FERRY_SOCKET, default /run/ferry/ferry.sock)
  -o FORMAT        table (default) or json
`

type globals struct {
	socket string
	output string
	out    io.Writer
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := globals{out: stdout}
	fs := flag.NewFlagSet("ferryctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	def := os.Getenv("FERRY_SOCKET")
	if def == "" {
		def = "/run/ferry/ferry.sock"
	}
	fs.StringVar(&g.socket, "socket", def, "ferryd debug socket")
	fs.StringVar(&g.output, "o", "table", "output format: table or json")
	fs.StringVar(&g.output, "output", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if g.output != "table" && g.output != "json" {
		fmt.Fprintf(stderr, "ferryctl: -o %q: output format must be table or json\n", g.output)
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	c := newClient(g.socket)
	var err error
	switch cmd {
	case "jobs":
		err = cmdJobs(ctx, c, g, rest)
	case "job":
		err = cmdJob(ctx, c, g, rest)
	case "watch":
		err = cmdWatch(ctx, c, g, rest)
	case "domains":
		err = cmdDomains(ctx, c, g, rest)
	case "abort":
		err = cmdAbort(ctx, c, g, rest)
	case "migrate":
		err = cmdMigrate(ctx, c, g, rest)
	case "proxy":
		err = cmdProxy(ctx, c, g, rest)
	case "postcopy":
		err = cmdPostCopy(ctx, c, g, rest)
	case "version":
		fmt.Fprintln(stdout, "ferryctl", version.Version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "ferryctl: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var ue usageError
	var fe failedJob
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "ferryctl:", err)
		return 2
	case errors.As(err, &fe):
		return 1
	case errors.Is(err, context.Canceled):
		return 130
	default:
		fmt.Fprintln(stderr, "ferryctl:", err)
		return 1
	}
}

type usageError string

func (e usageError) Error() string { return string(e) }

// failedJob ends `watch NAME` with a non-zero status when the job did not complete.
type failedJob struct{ phase migration.Phase }

func (e failedJob) Error() string { return "migration ended " + string(e.phase) }

func subFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func cmdJobs(ctx context.Context, c *client, g globals, args []string) error {
	fs := subFlags("jobs")
	all := fs.Bool("all", false, "")
	if err := fs.Parse(args); err != nil {
		return usageError("jobs: " + err.Error() + " (usage: jobs [--all])")
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("jobs takes no arguments, got %q (usage: jobs [--all])", fs.Arg(0)))
	}
	q := url.Values{}
	if *all {
		q.Set("all", "1")
	}
	var resp struct {
		Node string          `json:"node"`
		Jobs []migration.Job `json:"jobs"`
	}
	if err := c.get(ctx, "/v1/jobs", q, &resp); err != nil {
		return err
	}
	if g.output == "json" {
		if resp.Jobs == nil {
			resp.Jobs = []migration.Job{}
		}
		return printJSON(g.out, resp.Jobs)
	}
	printJobs(g.out, resp.Jobs)
	return nil
}

func cmdJob(ctx context.Context, c *client, g globals, args []string) error {
	if len(args) != 1 || args[0] == "" {
		return usageError("job needs exactly one domain name (usage: job NAME)")
	}
	var j migration.Job
	if err := c.get(ctx, "/v1/jobs/"+url.PathEscape(args[0]), nil, &j); err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(g.out, j)
	}
	printJob(g.out, j)
	return nil
}

type socketStatus struct {
	Socket         string `json:"socket"`
	Up             bool   `json:"up"`
	LibvirtVersion string `json:"libvirtVersion"`
	LastError      string `json:"lastError"`
}

func cmdDomains(ctx context.Context, c *client, g globals, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Sprintf("domains takes no arguments, got %q", args[0]))
	}
	var resp struct {
		Node    string             `json:"node"`
		Domains []migration.Domain `json:"domains"`
		Libvirt []socketStatus     `json:"libvirt"`
	}
	if err := c.get(ctx, "/v1/domains", nil, &resp); err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(g.out, resp)
	}
	printDomains(g.out, resp.Node, resp.Domains, resp.Libvirt)
	return nil
}

func cmdProxy(ctx context.Context, c *client, g globals, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Sprintf("proxy takes no arguments, got %q", args[0]))
	}
	var resp struct {
		Enabled    bool   `json:"enabled"`
		TLS        bool   `json:"tls"`
		SocketDir  string `json:"socketDir"`
		Registered []struct {
			ID       string            `json:"id"`
			Domain   string            `json:"domain"`
			Targets  map[string]string `json:"targets"`
			Limits   map[string]int    `json:"limits"`
			State    string            `json:"state"`
			Expires  time.Time         `json:"expires"`
			PeerNode string            `json:"peerNode"`
		} `json:"registered"`
	}
	if err := c.get(ctx, "/v1/proxy", nil, &resp); err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(g.out, resp)
	}
	if !resp.Enabled {
		fmt.Fprintln(g.out, "migration proxy: off (--proxy-listen is empty)")
		return nil
	}
	mode := "mutual TLS"
	if !resp.TLS {
		mode = "plain TCP with splice (trusted migration network)"
	}
	fmt.Fprintf(g.out, "migration proxy: %s, sockets in %s\n", mode, resp.SocketDir)
	if len(resp.Registered) == 0 {
		fmt.Fprintln(g.out, "no incoming migrations prepared")
		return nil
	}
	tw := table(g.out)
	fmt.Fprintln(tw, "MIGRATION\tDOMAIN\tSTATE\tSTREAMS\tPEER NODE\tEXPIRES")
	for _, m := range resp.Registered {
		streams := make([]string, 0, len(m.Targets))
		for k := range m.Targets {
			streams = append(streams, fmt.Sprintf("%s(%d)", k, m.Limits[k]))
		}
		sort.Strings(streams)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Domain, m.State, strings.Join(streams, ","), dash(m.PeerNode), m.Expires.Format(time.RFC3339))
	}
	return tw.Flush()
}
