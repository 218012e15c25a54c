package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// Bed is a running pair of nodes. Its methods are safe for concurrent use;
// several processes may also hold a Bed for the same Dir.
type Bed struct {
	cfg   Config // CacheDir and FerrydBin as the bed was brought up with
	accel string
	nodes map[string]*Node

	mu sync.Mutex // guards st
	st *state
}

func newBed(cfg Config, st *state) *Bed {
	b := &Bed{cfg: cfg, accel: st.Accel, st: st, nodes: map[string]*Node{}}
	for _, d := range nodeDefs {
		b.nodes[d.name] = newNode(cfg, d)
	}
	return b
}

// Up starts a fresh bed, first removing whatever a crashed previous run left.
func Up(ctx context.Context, cfg Config) (*Bed, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("testbed: Up needs root")
	}
	for _, f := range []string{kernelPath(cfg.CacheDir), initrdPath(cfg.CacheDir)} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("testbed: %s missing: run `testbed prepare` (testbed.Prepare) first", f)
		}
	}
	for _, tool := range []string{"libvirtd", "qemu-system-x86_64", "socat", "ip", "ss", "nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("testbed: %s not found: run `testbed prepare` (testbed.Prepare) first", tool)
		}
	}
	t0 := time.Now()
	if err := cleanup(ctx, cfg); err != nil {
		return nil, fmt.Errorf("testbed: cleaning up a previous bed: %w", err)
	}
	accel, reason := detectAccel()
	if accel == "kvm" {
		logf(cfg.Log, "accelerator: KVM")
	} else {
		logf(cfg.Log, "accelerator: TCG (%s)", reason)
	}
	st := &state{Accel: accel, AccelReason: reason, CacheDir: cfg.CacheDir, FerrydBin: cfg.FerrydBin, Nodes: map[string]*nodeState{}}
	for _, d := range nodeDefs {
		st.Nodes[d.name] = &nodeState{}
	}
	b := newBed(cfg, st)
	if err := b.up(ctx); err != nil {
		_ = cleanup(context.Background(), cfg)
		return nil, err
	}
	logf(cfg.Log, "up in %.1fs (state in %s)", time.Since(t0).Seconds(), cfg.Dir)
	return b, nil
}

func (b *Bed) up(ctx context.Context) error {
	ca, err := writeCerts(b.cfg.Dir)
	if err != nil {
		return fmt.Errorf("testbed: proxy certificates: %w", err)
	}
	for _, sub := range []string{"guests", "relays"} {
		if err := os.RemoveAll(filepath.Join(b.cfg.Dir, sub)); err != nil {
			return err
		}
	}
	for _, d := range nodeDefs {
		if err := prepareNodeDir(b.cfg, d); err != nil {
			return err
		}
		if err := writeQEMUCerts(b.cfg, ca, d); err != nil {
			return fmt.Errorf("testbed: QEMU's migration certificates: %w", err)
		}
	}
	if err := b.save(); err != nil {
		return err
	}
	if err := createNetwork(ctx); err != nil {
		return err
	}
	if err := ensureStacks(ctx, b.cfg); err != nil {
		return err
	}
	for _, d := range nodeDefs {
		p, err := startHolder(b.cfg, d)
		stack := b.cfg.stackOf(d.name)
		b.setProc(d.name, func(n *nodeState) { n.Holder, n.Stack = p, stack })
		if err != nil {
			return err
		}
		if err := waitHolder(b.cfg, d, p); err != nil {
			return err
		}
	}
	// In parallel: each probes QEMU, which takes seconds when its cache is cold.
	logf(b.cfg.Log, "starting libvirtd on a and b")
	if err := b.startAll(ctx, b.startLibvirtd, b.waitLibvirtd, func(n *nodeState, p proc) { n.Libvirtd = p }); err != nil {
		return err
	}
	for _, d := range nodeDefs {
		logf(b.cfg.Log, "node %s runs the %s stack", d.name, b.StackVersions(d.name))
		sec, err := b.checkSecurity(d.name)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.st.QEMUGID = sec.GID
		b.mu.Unlock()
		if d.name == nodeDefs[0].name {
			logf(b.cfg.Log, "security: %s", describeSecurity(sec))
		}
	}
	// Saved now: starting ferryd reads the state file back.
	if err := b.save(); err != nil {
		return err
	}
	if b.cfg.FerrydBin != "" {
		logf(b.cfg.Log, "starting ferryd (%s) on a and b", b.cfg.FerrydBin)
		if err := b.startAll(ctx, b.startFerryd, b.waitFerryd, func(n *nodeState, p proc) { n.Ferryd = p }); err != nil {
			return err
		}
	}
	b.mu.Lock()
	b.st.Ready = true
	b.mu.Unlock()
	return b.save()
}

func (b *Bed) startAll(ctx context.Context, start func(string) (proc, error), wait func(context.Context, string, proc) error, set func(*nodeState, proc)) error {
	errs := make([]error, len(nodeDefs))
	var wg sync.WaitGroup
	for i, d := range nodeDefs {
		p, err := start(d.name)
		b.setProc(d.name, func(n *nodeState) { set(n, p) })
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = wait(ctx, d.name, p)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Open attaches to the bed that a previous Up (usually `testbed up`) left running.
func Open(cfg Config) (*Bed, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	var st state
	if err := readJSON(statePath(cfg.Dir), &st); err != nil {
		if errors.Is(err, errNoState) {
			return nil, fmt.Errorf("testbed: no bed is up in %s (run `testbed up`)", cfg.Dir)
		}
		return nil, err
	}
	if !st.Ready {
		return nil, fmt.Errorf("testbed: the bed in %s never finished coming up (run `testbed up` again)", cfg.Dir)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]*nodeState{}
	}
	cfg.CacheDir = st.CacheDir
	cfg.FerrydBin = st.FerrydBin
	return newBed(cfg, &st), nil
}

// Down stops everything the bed started. Logs and consoles stay in Dir for
// post-mortems; the next Up removes them.
func (b *Bed) Down() error {
	err := cleanup(context.Background(), b.cfg)
	logf(b.cfg.Log, "down")
	return err
}

// Cleanup stops whatever a bed in cfg.Dir left running, even one that
// crashed half-way up; `testbed down` uses it when there is no bed to Open.
func Cleanup(cfg Config) error {
	cfg, err := cfg.resolve()
	if err != nil {
		return err
	}
	return cleanup(context.Background(), cfg)
}

// Accel is "kvm" or "tcg".
func (b *Bed) Accel() string { return b.accel }

// Node returns node "a" or "b", nil for any other name.
func (b *Bed) Node(name string) *Node { return b.nodes[name] }

// Dir is the bed's state directory.
func (b *Bed) Dir() string { return b.cfg.Dir }

// Libvirt opens a new connection to the node's libvirtd; the caller disconnects it.
func (b *Bed) Libvirt(node string) (*libvirt.Libvirt, error) {
	n := b.nodes[node]
	if n == nil {
		_, err := lookupNode(node)
		return nil, err
	}
	l, err := dialLibvirt(n.LibvirtSocket, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("testbed: connecting to libvirtd on node %s: %w", node, err)
	}
	return l, nil
}

// Exec prepares a command that runs inside the node's network and mount
// namespaces (e.g. curl against MetricsAddr, ss, ip).
func (b *Bed) Exec(ctx context.Context, node string, args ...string) *exec.Cmd {
	if _, err := lookupNode(node); err != nil {
		return failedCmd(ctx, err)
	}
	if len(args) == 0 {
		return failedCmd(ctx, errors.New("testbed: Exec needs a command"))
	}
	argv, err := b.nsenter(node, args...)
	if err != nil {
		return failedCmd(ctx, err)
	}
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// failedCmd carries err to the caller's Start/Run/Output.
func failedCmd(ctx context.Context, err error) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "false")
	cmd.Err = err
	return cmd
}

func (b *Bed) plainProxy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st.PlainProxy
}

// SetProxyTLS restarts both ferryds with their proxies speaking mutual TLS
// (on) or plain TCP (off).
func (b *Bed) SetProxyTLS(ctx context.Context, on bool) error {
	if b.cfg.FerrydBin == "" {
		return errors.New("testbed: no ferryd runs in this bed")
	}
	b.mu.Lock()
	b.st.PlainProxy = !on
	b.mu.Unlock()
	return b.restartFerryds(ctx)
}

// restartFerryds saves the state and restarts both ferryds with it.
func (b *Bed) restartFerryds(ctx context.Context) error {
	if err := b.save(); err != nil {
		return err
	}
	for _, d := range nodeDefs {
		if err := b.RestartFerryd(ctx, d.name); err != nil {
			return err
		}
	}
	return nil
}

// FerrydPID is the process ID of the node's ferryd, 0 if none runs.
func (b *Bed) FerrydPID(node string) int {
	b.reload()
	b.mu.Lock()
	defer b.mu.Unlock()
	if ns := b.st.Nodes[node]; ns != nil && ns.Ferryd.alive() {
		return ns.Ferryd.PID
	}
	return 0
}

func (b *Bed) ferrydArgs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.st.FerrydArgs...)
}

// SetFerrydArgs restarts both ferryds with these extra flags (replacing
// earlier extra flags; none restores the defaults).
func (b *Bed) SetFerrydArgs(ctx context.Context, args ...string) error {
	if b.cfg.FerrydBin == "" {
		return errors.New("testbed: no ferryd runs in this bed")
	}
	b.mu.Lock()
	b.st.FerrydArgs = append([]string(nil), args...)
	b.mu.Unlock()
	return b.restartFerryds(ctx)
}

func (b *Bed) ferrydOwnArgs() (args, caps []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.st.FerrydOwnArgs...), append([]string(nil), b.st.FerrydCaps...)
}

// SetFerrydOwnArgs restarts both ferryds as a deployment runs them: its
// own arguments in place of the bed's ("$(NODE_NAME)" becomes the node's
// name), followed by the bed-wide and per-node extra flags and the bed's
// debug socket, as root with only the capabilities caps (e.g.
// DAC_OVERRIDE). No args restores the bed's own ferryds.
func (b *Bed) SetFerrydOwnArgs(ctx context.Context, caps []string, args ...string) error {
	if b.cfg.FerrydBin == "" {
		return errors.New("testbed: no ferryd runs in this bed")
	}
	b.mu.Lock()
	b.st.FerrydOwnArgs = append([]string(nil), args...)
	b.st.FerrydCaps = append([]string(nil), caps...)
	b.mu.Unlock()
	return b.restartFerryds(ctx)
}

func (b *Bed) nodeFerrydArgs(node string) []string {
	if ns := b.nodeState(node); ns != nil {
		return append([]string(nil), ns.FerrydArgs...)
	}
	return nil
}

// SetNodeFerrydArgs restarts one node's ferryd with these extra flags,
// replacing that node's earlier ones (none restores the bed-wide flags
// alone). Flags naming libvirt sockets (--libvirt-socket,
// --libvirt-socket-glob) replace the node's own libvirt socket.
func (b *Bed) SetNodeFerrydArgs(ctx context.Context, node string, args ...string) error {
	if _, err := lookupNode(node); err != nil {
		return err
	}
	if b.cfg.FerrydBin == "" {
		return errors.New("testbed: no ferryd runs in this bed")
	}
	b.setProc(node, func(n *nodeState) { n.FerrydArgs = append([]string(nil), args...) })
	return b.RestartFerryd(ctx, node)
}
