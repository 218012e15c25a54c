// Command ferryctl reads a node's ferryd over its debug socket: migration
// jobs, their evidence, live progress, and the node's domains.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
	"github.com/ferry-vm/ferry/internal/version"
)

// Exit statuses, a contract for scripts.
const (
	exitOK          = 0
	exitFailed      = 1 // a migration failed, or ferryd refused or failed the request
	exitUsage       = 2 // the command line is wrong
	exitUnreachable = 3 // ferryd's debug socket cannot be reached
	exitInterrupted = 130
)

const exitCodesHelp = `Exit status:
  0  success (for migrate, watch NAME and abort: the migration ended as asked)
  1  the migration failed or was not aborted, check found the domain cannot move, or ferryd
     refused the request
  2  usage error: unknown command or flag, wrong arguments
  3  ferryd unreachable: not running, another socket path, or no permission
`

// outputs are the -o formats; wide adds columns to tables.
var outputs = []string{"table", "wide", "json", "yaml"}

const defaultSocket = "/run/ferry/ferry.sock"

type globals struct {
	socket string
	// libvirtSocket picks a domain by its libvirt socket too, where more
	// than one serves a domain of that name.
	libvirtSocket string
	output        string
	out           io.Writer
	// errOut takes what is said on the way, never part of the answer
	// (-o json stays one document).
	errOut io.Writer
	// client names libvirtSocket with every domain it asks about.
	client *client.Client
}

// structured says whether output is a document (json, yaml), not a table.
func (g *globals) structured() bool { return g.output == "json" || g.output == "yaml" }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{out: stdout, errOut: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var re runError
	var ue usageError
	var fe failedJob
	var nm notMigratable
	var un *client.UnreachableError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &re):
		err = re.err
	case errors.As(err, &ue):
	default:
		// Anything cobra itself refused (flags, arguments, commands) is usage.
		ue = usageError(err.Error())
	}
	switch {
	case errors.As(err, &fe), errors.As(err, &nm):
		return exitFailed
	case errors.As(err, &un):
		fmt.Fprintln(stderr, "ferryctl:", clean(err.Error()))
		return exitUnreachable
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case ue != "":
		path := "ferryctl"
		if c, _, err := root.Find(args); err == nil {
			path = c.CommandPath()
		}
		fmt.Fprintf(stderr, "ferryctl: %s\nRun '%s --help' for usage.\n", clean(string(ue)), clean(path))
		return exitUsage
	default:
		// ferryd's errors carry libvirt's and a peer's words.
		fmt.Fprintln(stderr, "ferryctl:", clean(err.Error()))
		return exitFailed
	}
}

func newRoot(g *globals) *cobra.Command {
	def := os.Getenv("FERRY_SOCKET")
	if def == "" {
		def = defaultSocket
	}
	root := &cobra.Command{
		Use:   "ferryctl",
		Short: "ferryctl reads ferryd on this node",
		Long: "ferryctl reads ferryd on this node over its debug socket: migration jobs and their evidence,\n" +
			"live progress, the node's domains, and it starts, switches and aborts migrations.\n\n" +
			"Flags go before or after the command (ferryctl -o json jobs, ferryctl jobs -o json).\n\n" + exitCodesHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		// The completion command is ferryctl's own, for bash and zsh.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		Args:              cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var names []string
			for _, sub := range c.Commands() {
				if sub.Name() != "help" {
					names = append(names, sub.Name())
				}
			}
			return usageError("a command is needed: " + strings.Join(names, ", "))
		},
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if !validOutput(g.output) {
				return usageError(fmt.Sprintf("-o %q: output format must be one of %s", g.output, strings.Join(outputs, ", ")))
			}
			g.client = client.New(g.socket).WithLibvirtSocket(g.libvirtSocket)
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.socket, "socket", def, "ferryd debug socket (env FERRY_SOCKET)")
	pf.StringVar(&g.libvirtSocket, "libvirt-socket", "", "the libvirt socket serving NAME, where two serve a domain of that name")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: "+strings.Join(outputs, ", "))
	root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputs, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(fmt.Sprintf("%s: %v (usage: %s)", c.CommandPath(), err, c.UseLine()))
	})
	root.AddCommand(jobsCmd(g), jobCmd(g), watchCmd(g), domainsCmd(g), checkCmd(g), planCmd(g), evacuateCmd(g), migrateCmd(g), abortCmd(g),
		postCopyCmd(g), resolveCmd(g), recoverCmd(g), giveUpCmd(g), proxyCmd(g), completionCmd(), versionCmd())
	return root
}

func validOutput(o string) bool {
	for _, v := range outputs {
		if o == v {
			return true
		}
	}
	return false
}

// runE marks errors a command returns once it runs, so that run can tell
// them from the command-line errors cobra returns before.
func runE(f func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		err := f(c.Context(), args)
		var ue usageError
		if err == nil || errors.As(err, &ue) {
			return err
		}
		return runError{err}
	}
}

type runError struct{ err error }

func (e runError) Error() string { return e.err.Error() }
func (e runError) Unwrap() error { return e.err }

type usageError string

func (e usageError) Error() string { return string(e) }

// failedJob ends `watch NAME` with a non-zero status when the job did not complete.
type failedJob struct{ phase api.Phase }

func (e failedJob) Error() string { return "migration ended " + string(e.phase) }

// exactlyOneDomain is the argument check of commands taking one domain name.
func exactlyOneDomain(use string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != 1 || args[0] == "" {
			return usageError(fmt.Sprintf("%s needs exactly one domain name (usage: %s)", c.Name(), use))
		}
		return nil
	}
}

func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Sprintf("%s takes no arguments, got %q (usage: %s)", c.Name(), args[0], c.UseLine()))
	}
	return nil
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "ferryctl's version",
		Args:  noArgs,
		Run: func(c *cobra.Command, _ []string) {
			fmt.Fprintln(c.OutOrStdout(), "ferryctl", version.Version)
		},
	}
}
