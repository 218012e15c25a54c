package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// A stack is the libvirt and QEMU a node runs. The default one is the
// host's own (bookworm-backports, see installPackages); the others come
// from a Debian root filesystem of their suite, built once from Debian's
// packages and kept under the cache, whose /usr the node's mount
// namespace puts over the host's: its libvirtd, its QEMU and every tool
// the bed runs in the node are then that suite's, with the node's own
// /etc/libvirt, /run and /var beside them, as a virt-launcher runs a
// libvirt of its own on a host.
type stackDef struct {
	// suite is what the root filesystem is built from, sources its apt
	// lines, and release the suite its libvirt and QEMU are taken from.
	suite   string
	sources []string
	release string
}

const (
	StackDefault = "default"
	StackOldest  = "oldest"
	StackNewest  = "newest"
)

const debianMirror = "http://deb.debian.org/debian"

var stackDefs = map[string]stackDef{
	// Debian 12 as it ships: libvirt 9.0, QEMU 7.2.
	StackOldest: {suite: "bookworm", sources: []string{"deb " + debianMirror + " bookworm main"}},
	// Debian 13 with its backports: libvirt 12.9, QEMU 11.1.
	StackNewest: {suite: "trixie", release: "trixie-backports", sources: []string{
		"deb " + debianMirror + " trixie main",
		"deb " + debianMirror + " trixie-backports main",
	}},
}

// stackPackages are what a node needs of its stack: libvirt's daemon and
// QEMU driver, QEMU, virsh, and the tools the bed runs in the node.
var stackPackages = []string{"libvirt-daemon", "libvirt-daemon-driver-qemu", "libvirt-clients", "qemu-system-x86",
	"iproute2", "socat", "util-linux", "procps"}

// parseStacks reads which stack each node runs: "newest" for both, or
// "a=oldest,b=newest"; a node not named runs the default.
func parseStacks(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		node, name, named := strings.Cut(strings.TrimSpace(part), "=")
		if !named {
			node, name = "", node
		}
		if _, ok := stackDefs[name]; !ok && name != StackDefault {
			return nil, fmt.Errorf("testbed: unknown stack %q in %q (default, oldest or newest)", name, s)
		}
		if node == "" {
			for _, d := range nodeDefs {
				out[d.name] = name
			}
			continue
		}
		if _, err := lookupNode(node); err != nil {
			return nil, fmt.Errorf("testbed: stack for %q in %q: %w", node, s, err)
		}
		out[node] = name
	}
	return out, nil
}

// needsStacks says whether a node runs a stack other than the host's.
func (c Config) needsStacks() bool {
	for _, d := range nodeDefs {
		if c.stackOf(d.name) != StackDefault {
			return true
		}
	}
	return false
}

// stackOf is the stack node runs.
func (c Config) stackOf(node string) string {
	if s := c.Stacks[node]; s != "" {
		return s
	}
	return StackDefault
}

// stackRoot is where a stack's root filesystem is kept.
func stackRoot(cacheDir, name string) string { return filepath.Join(cacheDir, "stacks", name) }

// ensureStacks builds the root filesystem of each stack the bed's nodes
// run that is not there yet.
func ensureStacks(ctx context.Context, cfg Config) error {
	var names []string
	for _, d := range nodeDefs {
		if n := cfg.stackOf(d.name); n != StackDefault && !contains(names, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if err := ensureStack(ctx, cfg, name); err != nil {
			return err
		}
	}
	return nil
}

// ensureStack builds one stack's root filesystem with mmdebstrap, unless
// a finished one is kept (its versions file is written last).
func ensureStack(ctx context.Context, cfg Config, name string) error {
	root := stackRoot(cfg.CacheDir, name)
	if _, err := os.Stat(filepath.Join(root, "versions")); err == nil {
		return nil
	}
	def := stackDefs[name]
	tmp := root + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return err
	}
	logf(cfg.Log, "building the %s stack's root filesystem from Debian %s (once; kept in %s)", name, def.suite, root)
	t0 := time.Now()
	args := []string{"--variant=minbase", "--include=" + strings.Join(stackPackages, ",")}
	if def.release != "" {
		// Backports are never chosen by default: its libvirt and QEMU,
		// and what they need from it, are.
		args = append(args, "--aptopt=APT::Default-Release \""+def.release+"\";")
	}
	args = append(append(args, def.suite, tmp), def.sources...)
	if err := run(ctx, "mmdebstrap", args...); err != nil {
		return fmt.Errorf("testbed: building the %s stack: %w", name, err)
	}
	versions, err := exec.CommandContext(ctx, "chroot", tmp, "dpkg-query", "-W", "libvirt-daemon", "qemu-system-x86").Output()
	if err != nil {
		return fmt.Errorf("testbed: the %s stack's versions: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "versions"), versions, 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	if err := os.Rename(tmp, root); err != nil {
		return err
	}
	logf(cfg.Log, "the %s stack is built in %.0fs: %s", name, time.Since(t0).Seconds(), strings.Join(strings.Fields(string(versions)), " "))
	return nil
}

// stackMounts is what a node's namespace mounts to run stack name: its
// /usr over the host's, with the loader's cache that goes with it.
func stackMounts(cacheDir, name string) string {
	if name == StackDefault {
		return ""
	}
	root := stackRoot(cacheDir, name)
	return fmt.Sprintf("mount --bind %[1]s/etc/ld.so.cache /etc/ld.so.cache\nmount --bind %[1]s/usr /usr\n", root)
}

// sharedMachine is a machine type every stack's QEMU runs: a guest of
// nodes of different stacks is pinned to it, as a fleet mid-upgrade pins
// its guests' (QEMU refuses an incoming guest of a machine type newer
// than its own).
const sharedMachine = "pc-i440fx-7.2"

// machineType is the machine type of the bed's guests: the QEMU's newest
// where all nodes run one stack, sharedMachine where they differ.
func (b *Bed) machineType() string {
	var first string
	for i, d := range nodeDefs {
		name := b.stackRunning(d.name)
		if i == 0 {
			first = name
		} else if name != first {
			return sharedMachine
		}
	}
	return "pc"
}

// StackVersions says which stack each node runs, and its libvirt and
// QEMU, as the bed's log and the tests' reports name them.
func (b *Bed) StackVersions(node string) string {
	name := b.stackRunning(node)
	if name == StackDefault {
		return StackDefault + " (the host's)"
	}
	v, err := os.ReadFile(filepath.Join(stackRoot(b.cfg.CacheDir, name), "versions"))
	if err != nil {
		return name
	}
	return name + " (" + strings.Join(strings.Fields(string(v)), " ") + ")"
}

// stackRunning is the stack the node's namespace runs, as the bed
// recorded it when it made the namespace.
// Stack names the stack the node runs (StackDefault: the host's).
func (b *Bed) Stack(node string) string { return b.stackRunning(node) }

func (b *Bed) stackRunning(node string) string {
	if st := b.nodeState(node); st != nil && st.Stack != "" {
		return st.Stack
	}
	return StackDefault
}
