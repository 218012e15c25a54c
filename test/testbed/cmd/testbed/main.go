// Command testbed drives Ferry's two-node libvirt test bed from a shell.
// Run `testbed help` for the verbs. Needs root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ferry-vm/ferry/test/testbed"
)

const usage = `usage: testbed VERB [ARGS]

Verbs:
  prepare                      install packages, build the guest kernel + initramfs cache
  up [--ferryd PATH]           start nodes a and b (default ferryd: <repo>/bin/ferryd if it exists;
                               --ferryd= runs none)
  down                         stop everything the bed started
  env                          print FERRY_* shell variables describing the bed
  guest start NAME [--node a] [--memory-mib 512] [--dirty-mib 256] [--dirty-rate-mibs 64] [--fill stamp|zero|random]
                               rate 0 = as fast as possible, -1 = idle
  guest destroy NAME
  migrate NAME --from a --to b [--postcopy] [--postcopy-after DURATION] [--auto-converge]
                               [--bandwidth-mibs N] [--postcopy-bandwidth-mibs N]
                               [--parallel N] [--compression none|zstd|auto] [--data-path proxy|direct] [--via ferry|socat|raw]
                               [--policy observe|advise|act] [--max-downtime-ms N]
  console NAME                 the guest's serial console across all nodes
  exec NODE -- CMD...          run CMD in the node's network + mount namespaces
  cut-link | restore-link      take the veth between the nodes down / up
  reset-migration              break the in-flight migrations' connections
  restart-libvirtd NODE
  restart-ferryd NODE
  ferryd-args NODE [-- FLAGS...]
                               restart the node's ferryd with extra flags (none: back to the
                               defaults); --libvirt-socket(-glob) replaces the node's own socket
  kill-qemu NODE NAME          SIGKILL the guest's QEMU on that node, as a crash would
  proxy-tls on|off             restart both ferryds with their proxies on mutual TLS or plain TCP
  help

Environment: FERRY_TESTBED_DIR (state, default /var/tmp/ferry-testbed),
FERRY_TESTBED_CACHE (kernel + initramfs, default <repo>/.cache/testbed),
FERRY_BED_STACKS (the libvirt and QEMU each node runs: newest, or a=oldest,b=newest;
default the host's).
`

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	var exitErr *exec.ExitError
	var uerr usageError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		os.Exit(exitErr.ExitCode())
	case errors.As(err, &uerr):
		fmt.Fprintf(os.Stderr, "testbed: %v\n(run `testbed help` for usage)\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("missing verb")
	}
	cfg := testbed.Config{Log: os.Stderr}
	verb, args := args[0], args[1:]
	switch verb {
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	case "prepare":
		if err := noArgs(verb, args); err != nil {
			return err
		}
		return testbed.Prepare(ctx, cfg)
	case "up":
		return up(ctx, cfg, args)
	case "down":
		if err := noArgs(verb, args); err != nil {
			return err
		}
		if b, err := testbed.Open(cfg); err == nil {
			return b.Down()
		}
		return testbed.Cleanup(cfg)
	case "guest":
		return guest(ctx, cfg, args)
	case "exec":
		return execIn(ctx, cfg, args)
	}
	open := func() (*testbed.Bed, error) { return testbed.Open(cfg) }
	switch verb {
	case "env":
		return withNoArgs(verb, args, open, env)
	case "migrate":
		return migrate(ctx, open, args)
	case "console":
		return console(open, args)
	case "cut-link":
		return withNoArgs(verb, args, open, (*testbed.Bed).CutLink)
	case "restore-link":
		return withNoArgs(verb, args, open, (*testbed.Bed).RestoreLink)
	case "reset-migration":
		return withNoArgs(verb, args, open, (*testbed.Bed).ResetMigration)
	case "restart-libvirtd":
		return restart(ctx, verb, args, open, (*testbed.Bed).RestartLibvirtd)
	case "restart-ferryd":
		return restart(ctx, verb, args, open, (*testbed.Bed).RestartFerryd)
	case "ferryd-args":
		if len(args) == 0 || (args[0] != "a" && args[0] != "b") {
			return usagef("ferryd-args: want NODE (a or b) first")
		}
		node, flags := args[0], args[1:]
		if len(flags) > 0 && flags[0] == "--" {
			flags = flags[1:]
		}
		b, err := open()
		if err != nil {
			return err
		}
		return b.SetNodeFerrydArgs(ctx, node, flags...)
	case "kill-qemu":
		if len(args) != 2 || (args[0] != "a" && args[0] != "b") {
			return usagef("kill-qemu: want NODE (a or b) and a guest NAME")
		}
		b, err := open()
		if err != nil {
			return err
		}
		return b.KillQEMU(args[0], args[1])
	case "proxy-tls":
		if len(args) != 1 || (args[0] != "on" && args[0] != "off") {
			return usagef("proxy-tls takes on or off")
		}
		b, err := open()
		if err != nil {
			return err
		}
		return b.SetProxyTLS(ctx, args[0] == "on")
	}
	return usagef("unknown verb %q", verb)
}

type opener func() (*testbed.Bed, error)

func up(ctx context.Context, cfg testbed.Config, args []string) error {
	fs := newFlags("up")
	ferryd := fs.String("ferryd", "", "ferryd binary")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("up: unexpected argument %q", pos[0])
	}
	cfg.FerrydBin = *ferryd
	if !isSet(fs, "ferryd") {
		if root, err := testbed.RepoRoot(); err == nil {
			if fi, err := os.Stat(filepath.Join(root, "bin", "ferryd")); err == nil && !fi.IsDir() {
				cfg.FerrydBin = filepath.Join(root, "bin", "ferryd")
			}
		}
	}
	_, err = testbed.Up(ctx, cfg)
	return err
}

func guest(ctx context.Context, cfg testbed.Config, args []string) error {
	if len(args) == 0 {
		return usagef("guest: missing sub-verb (start or destroy)")
	}
	sub, args := args[0], args[1:]
	fs := newFlags("guest " + sub)
	var spec testbed.GuestSpec
	switch sub {
	case "start":
		fs.StringVar(&spec.Node, "node", "a", "node to start on")
		fs.IntVar(&spec.MemoryMiB, "memory-mib", 512, "guest RAM")
		fs.IntVar(&spec.DirtyMiB, "dirty-mib", 256, "memory the guest keeps dirtying")
		fs.IntVar(&spec.DirtyRateMiBs, "dirty-rate-mibs", 64, "MiB/s; 0 = max, -1 = idle")
		fs.StringVar(&spec.Fill, "fill", "stamp", "what a dirtied page holds: stamp (one changing byte), zero, or random")
	case "destroy":
	default:
		return usagef("guest: unknown sub-verb %q (want start or destroy)", sub)
	}
	name, err := oneName(fs, "guest "+sub, args)
	if err != nil {
		return err
	}
	b, err := testbed.Open(cfg)
	if err != nil {
		return err
	}
	if sub == "destroy" {
		return b.DestroyGuest(name)
	}
	spec.Name = name
	return b.StartGuest(ctx, spec)
}

func migrate(ctx context.Context, open opener, args []string) error {
	fs := newFlags("migrate")
	var m testbed.MigrateSpec
	fs.StringVar(&m.From, "from", "", "source node")
	fs.StringVar(&m.To, "to", "", "target node")
	fs.BoolVar(&m.PostCopy, "postcopy", false, "allow post-copy")
	fs.DurationVar(&m.PostCopyAfter, "postcopy-after", 0, "switch to post-copy after this long (implies --postcopy)")
	fs.BoolVar(&m.AutoConverge, "auto-converge", false, "throttle the vCPU until the migration converges")
	fs.IntVar(&m.BandwidthMiBs, "bandwidth-mibs", 0, "pre-copy bandwidth limit in MiB/s (0 = none)")
	fs.IntVar(&m.PostCopyBandwidthMiBs, "postcopy-bandwidth-mibs", 0, "post-copy bandwidth limit in MiB/s (0 = none)")
	fs.IntVar(&m.Parallel, "parallel", 0, "multifd connections for the memory stream (Ferry's proxy only)")
	fs.StringVar(&m.Compression, "compression", "", "none, zstd (needs --parallel) or auto (Ferry's proxy only)")
	fs.StringVar(&m.DataPath, "data-path", "", "proxy, or direct: QEMU straight to QEMU under its own TLS (Ferry driving; the target node is named)")
	fs.StringVar(&m.Via, "via", "", "relay: ferry (the source ferryd drives it through Ferry's proxy; default with ferryd), socat, or raw (QEMU straight to QEMU over plain TCP)")
	fs.StringVar(&m.Policy, "policy", "", "convergence policy of a migration via ferry: observe, advise or act (default: ferryd's)")
	fs.Uint64Var(&m.MaxDowntimeMs, "max-downtime-ms", 0, "downtime cap of the policy of a migration via ferry (can only lower ferryd's)")
	name, err := oneName(fs, "migrate", args)
	if err != nil {
		return err
	}
	if m.From == "" || m.To == "" {
		return usagef("migrate: --from and --to are required")
	}
	if (m.Policy != "" || m.MaxDowntimeMs != 0) && m.Via != "" && m.Via != "ferry" {
		return usagef("migrate: --policy and --max-downtime-ms need --via ferry (the bed's socat relays run no policy)")
	}
	switch m.Policy {
	case "", "observe", "advise", "act":
	default:
		return usagef("migrate: --policy %q: want observe, advise or act", m.Policy)
	}
	m.Name = name
	b, err := open()
	if err != nil {
		return err
	}
	return b.Migrate(ctx, m)
}

func console(open opener, args []string) error {
	name, err := oneName(newFlags("console"), "console", args)
	if err != nil {
		return err
	}
	b, err := open()
	if err != nil {
		return err
	}
	out, err := b.Console(name)
	fmt.Print(out)
	return err
}

func env(b *testbed.Bed) error {
	for _, name := range []string{"a", "b"} {
		n := b.Node(name)
		p := "FERRY_" + strings.ToUpper(name) + "_"
		fmt.Printf("%sLIBVIRT_SOCKET=%s\n", p, n.LibvirtSocket)
		fmt.Printf("%sLIBVIRT_URI='qemu+unix:///system?socket=%s'\n", p, n.LibvirtSocket)
		fmt.Printf("%sDEBUG_SOCKET=%s\n", p, n.DebugSocket)
		fmt.Printf("%sMETRICS=http://%s/metrics\n", p, n.MetricsAddr)
		fmt.Printf("%sIP=%s\n", p, n.IP)
		fmt.Printf("%sPROXY=%s\n", p, n.ProxyAddr)
		fmt.Printf("%sNETNS=ferry-%s\n", p, name)
	}
	fmt.Printf("FERRY_TESTBED_DIR=%s\n", b.Dir())
	fmt.Printf("FERRY_TESTBED_ACCEL=%s\n", b.Accel())
	return nil
}

func execIn(ctx context.Context, cfg testbed.Config, args []string) error {
	if len(args) == 0 {
		return usagef("exec: missing NODE")
	}
	node, args := args[0], args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return usagef("exec: missing command after NODE --")
	}
	if node != "a" && node != "b" {
		return usagef("exec: unknown node %q (nodes are a and b)", node)
	}
	b, err := testbed.Open(cfg)
	if err != nil {
		return err
	}
	cmd := b.Exec(ctx, node, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}

func restart(ctx context.Context, verb string, args []string, open opener, fn func(*testbed.Bed, context.Context, string) error) error {
	if len(args) != 1 {
		return usagef("%s: want exactly one NODE (a or b), got %d arguments", verb, len(args))
	}
	if args[0] != "a" && args[0] != "b" {
		return usagef("%s: unknown node %q (nodes are a and b)", verb, args[0])
	}
	b, err := open()
	if err != nil {
		return err
	}
	return fn(b, ctx, args[0])
}

func withNoArgs(verb string, args []string, open opener, fn func(*testbed.Bed) error) error {
	if err := noArgs(verb, args); err != nil {
		return err
	}
	b, err := open()
	if err != nil {
		return err
	}
	return fn(b)
}

func noArgs(verb string, args []string) error {
	if len(args) > 0 {
		return usagef("%s: unexpected argument %q", verb, args[0])
	}
	return nil
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// oneName parses flags around exactly one positional NAME.
func oneName(fs *flag.FlagSet, verb string, args []string) (string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	switch len(pos) {
	case 0:
		return "", usagef("%s: missing NAME", verb)
	case 1:
		return pos[0], nil
	}
	return "", usagef("%s: unexpected argument %q", verb, pos[1])
}

// parse accepts flags before and after positional arguments
// (`guest start NAME --node b`), which flag.Parse alone does not.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
