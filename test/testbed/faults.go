package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CutLink takes the veth down on both ends: packets stop, sockets stay open,
// so only timeouts (libvirt keepalive, ~30 s) notice.
func (b *Bed) CutLink() error { return b.setLink("down") }

// RestoreLink brings the veth back up; the connected routes come back with it.
func (b *Bed) RestoreLink() error { return b.setLink("up") }

func (b *Bed) setLink(state string) error {
	for _, d := range nodeDefs {
		if err := run(context.Background(), "ip", "-n", d.netns, "link", "set", d.veth, state); err != nil {
			return fmt.Errorf("testbed: setting link %s %s: %w", d.veth, state, err)
		}
	}
	logf(b.cfg.Log, "link %s", state)
	return nil
}

// ResetMigration breaks every in-flight migration's connections at once,
// libvirt RPC and QEMU stream alike: `ss -K` aborts the relayed TCP
// connections inside the nodes' netns (the peer gets a RST), and any relay
// connection process still alive afterwards is killed by PID.
func (b *Bed) ResetMigration() error {
	relays := loadRelays(b.cfg.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	killed := 0
	var ssErrs []string
	if b.cfg.FerrydBin != "" {
		// Ferry's proxies: every connection to or from a node's proxy port
		// on the veth is a migration stream (control connections are brief).
		// Each has one end on every node, so they are aborted on the first
		// alone, and the RST ends the other node's end: aborted on both in
		// turn, the second node's ss also took the connection the first
		// node's ferryd had opened to resume the migration meanwhile, a
		// second fault nobody asked for.
		for _, d := range nodeDefs[:1] {
			args := []string{"ss", "-K", "-H", "-t", "-n", "(", "sport", "=", fmt.Sprintf(":%d", ProxyPort), "or", "dport", "=", fmt.Sprintf(":%d", ProxyPort), ")"}
			out, err := b.Exec(ctx, d.name, args...).CombinedOutput()
			if err != nil {
				ssErrs = append(ssErrs, fmt.Sprintf("node %s: %v: %s", d.name, err, strings.TrimSpace(string(out))))
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.TrimSpace(line) != "" {
					killed++
				}
			}
		}
	}
	if len(relays) == 0 && killed == 0 {
		if len(ssErrs) > 0 {
			return fmt.Errorf("testbed: reset-migration: %s", strings.Join(ssErrs, "; "))
		}
		return errors.New("testbed: no migration in progress")
	}
	for _, r := range relays {
		var filter []string
		for _, port := range []int{r.RPCPort, r.MigPort} {
			if len(filter) > 0 {
				filter = append(filter, "or")
			}
			filter = append(filter, "sport", "=", ":"+strconv.Itoa(port), "or", "dport", "=", ":"+strconv.Itoa(port))
		}
		args := append([]string{"ss", "-K", "-H", "-t", "-n", "("}, append(filter, ")")...)
		for _, node := range []string{r.From, r.To} {
			out, err := b.Exec(ctx, node, args...).CombinedOutput()
			if err != nil {
				ssErrs = append(ssErrs, fmt.Sprintf("node %s: %v: %s", node, err, strings.TrimSpace(string(out))))
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.TrimSpace(line) != "" {
					killed++
				}
			}
		}
	}
	logf(b.cfg.Log, "reset-migration: ss -K aborted %d TCP sockets", killed)
	if len(ssErrs) > 0 {
		logf(b.cfg.Log, "reset-migration: ss -K failed: %s", strings.Join(ssErrs, "; "))
	}
	// Aborted sockets make socat exit; survivors mean ss -K did not reach them.
	time.Sleep(300 * time.Millisecond)
	var kids []proc
	for _, r := range relays {
		for _, p := range r.Procs {
			kids = append(kids, p.children()...)
		}
	}
	for _, k := range kids {
		k.signal(syscall.SIGKILL)
	}
	if len(kids) > 0 {
		logf(b.cfg.Log, "reset-migration: killed %d relay connection processes", len(kids))
	}
	if killed == 0 && len(kids) == 0 {
		return errors.New("testbed: reset-migration found no migration connections to break")
	}
	return nil
}

// RestartLibvirtd kills the node's libvirtd and starts a new one in the same
// namespaces. Guests keep running: QEMU outlives libvirtd, which reconnects.
func (b *Bed) RestartLibvirtd(ctx context.Context, node string) error {
	t0 := time.Now()
	if err := b.StopLibvirtd(node); err != nil {
		return err
	}
	if err := b.StartLibvirtd(ctx, node); err != nil {
		return err
	}
	logf(b.cfg.Log, "libvirtd on node %s restarted in %.1fs", node, time.Since(t0).Seconds())
	return nil
}

// StopLibvirtd kills the node's libvirtd and leaves it down, as a crashed
// or upgrading hypervisor daemon would be; its guests keep running.
func (b *Bed) StopLibvirtd(node string) error {
	if _, err := lookupNode(node); err != nil {
		return err
	}
	if err := b.nodeState(node).Libvirtd.stop(15 * time.Second); err != nil {
		return fmt.Errorf("testbed: stopping libvirtd on node %s: %w", node, err)
	}
	logf(b.cfg.Log, "libvirtd on node %s stopped", node)
	return nil
}

// FreezeLibvirtd stops the node's libvirtd (SIGSTOP) for d, as a daemon
// stuck on a hung QEMU monitor or a slow disk is, then lets it go on. Its
// guests, and their migrations in QEMU, go on meanwhile; its clients'
// calls and pings go unanswered.
func (b *Bed) FreezeLibvirtd(node string, d time.Duration) error {
	if _, err := lookupNode(node); err != nil {
		return err
	}
	p := b.nodeState(node).Libvirtd
	if !p.alive() {
		return fmt.Errorf("testbed: libvirtd on node %s is not running", node)
	}
	p.signal(syscall.SIGSTOP)
	logf(b.cfg.Log, "froze libvirtd on node %s for %v", node, d)
	time.Sleep(d)
	p.signal(syscall.SIGCONT)
	logf(b.cfg.Log, "libvirtd on node %s goes on", node)
	return nil
}

// StartLibvirtd starts the node's libvirtd again after StopLibvirtd and
// waits until it answers.
func (b *Bed) StartLibvirtd(ctx context.Context, node string) error {
	if _, err := lookupNode(node); err != nil {
		return err
	}
	if b.nodeState(node).Libvirtd.alive() {
		return fmt.Errorf("testbed: libvirtd on node %s already runs", node)
	}
	p, err := b.startLibvirtd(node)
	b.setProc(node, func(n *nodeState) { n.Libvirtd = p })
	if err != nil {
		return err
	}
	return b.waitLibvirtd(ctx, node, p)
}

// RestartFerryd kills the node's ferryd and starts it again with the same flags.
func (b *Bed) RestartFerryd(ctx context.Context, node string) error {
	if _, err := lookupNode(node); err != nil {
		return err
	}
	if b.cfg.FerrydBin == "" {
		return errors.New("testbed: this bed runs no ferryd (it came up without FerrydBin)")
	}
	t0 := time.Now()
	if err := b.nodeState(node).Ferryd.stop(10 * time.Second); err != nil {
		return fmt.Errorf("testbed: stopping ferryd on node %s: %w", node, err)
	}
	p, err := b.startFerryd(node)
	b.setProc(node, func(n *nodeState) { n.Ferryd = p })
	if err != nil {
		return err
	}
	if err := b.waitFerryd(ctx, node, p); err != nil {
		return err
	}
	logf(b.cfg.Log, "ferryd on node %s restarted in %.1fs", node, time.Since(t0).Seconds())
	return nil
}

// CrashFerryd SIGKILLs the node's ferryd, as the OOM killer or a crash
// would (no graceful drain of the migrations it relays), then starts it
// again with the same flags, as the DaemonSet would.
func (b *Bed) CrashFerryd(ctx context.Context, node string) error {
	if _, err := lookupNode(node); err != nil {
		return err
	}
	if b.cfg.FerrydBin == "" {
		return errors.New("testbed: this bed runs no ferryd (it came up without FerrydBin)")
	}
	old := b.nodeState(node).Ferryd
	old.signal(syscall.SIGKILL)
	if !old.waitGone(5 * time.Second) {
		return fmt.Errorf("testbed: ferryd pid %d on node %s survived SIGKILL", old.PID, node)
	}
	logf(b.cfg.Log, "killed ferryd pid %d on node %s", old.PID, node)
	p, err := b.startFerryd(node)
	b.setProc(node, func(n *nodeState) { n.Ferryd = p })
	if err != nil {
		return err
	}
	return b.waitFerryd(ctx, node, p)
}

// qemuProc finds the guest's QEMU on a node from the pid file the node's
// libvirtd keeps. The command line and network namespace must match too: a
// stale pid file must never make the bed signal a process it did not start.
func (b *Bed) qemuProc(node, guest string) (proc, error) {
	d, err := lookupNode(node)
	if err != nil {
		return proc{}, err
	}
	if err := checkGuestName(guest); err != nil {
		return proc{}, err
	}
	pidfile := filepath.Join(b.nodes[node].Dir, "run", "libvirt", "qemu", guest+".pid")
	p, ok := pidFileProc(pidfile, "qemu-system", "guest="+guest)
	if !ok || !p.alive() {
		return proc{}, fmt.Errorf("testbed: no QEMU of guest %s runs on node %s", guest, node)
	}
	if !inNetns(p.PID, d.netns) {
		return proc{}, fmt.Errorf("testbed: QEMU pid %d of guest %s is not in node %s's namespace", p.PID, guest, node)
	}
	return p, nil
}

// QEMUPID is the process ID of the guest's QEMU on a node.
func (b *Bed) QEMUPID(node, guest string) (int, error) {
	p, err := b.qemuProc(node, guest)
	return p.PID, err
}

// KillQEMU SIGKILLs the guest's QEMU on a node, as a crash or the OOM killer
// would: libvirtd only sees its monitor socket close. It returns once the
// process is gone.
func (b *Bed) KillQEMU(node, guest string) error {
	p, err := b.qemuProc(node, guest)
	if err != nil {
		return err
	}
	p.signal(syscall.SIGKILL)
	if !p.waitGone(10 * time.Second) {
		return fmt.Errorf("testbed: QEMU pid %d of guest %s on node %s survived SIGKILL", p.PID, guest, node)
	}
	logf(b.cfg.Log, "killed QEMU pid %d of guest %s on node %s", p.PID, guest, node)
	return nil
}

func inNetns(pid int, netns string) bool {
	want, err := os.Stat(filepath.Join("/run/netns", netns))
	if err != nil {
		return false
	}
	got, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return false
	}
	return want.Sys().(*syscall.Stat_t).Ino == got.Sys().(*syscall.Stat_t).Ino
}

// LimitLink holds the veth between the nodes to mibs MiB/s each way with a
// token bucket on both ends (tc tbf), as a slow migration network would;
// 0 lifts the limit.
func (b *Bed) LimitLink(mibs int) error {
	for _, d := range nodeDefs {
		args := []string{"-n", d.netns, "qdisc", "replace", "dev", d.veth, "root", "tbf",
			"rate", fmt.Sprintf("%dmibps", mibs), "burst", "512kb", "latency", "200ms"}
		if mibs == 0 {
			args = []string{"-n", d.netns, "qdisc", "del", "dev", d.veth, "root"}
		}
		if err := run(context.Background(), "tc", args...); err != nil && mibs != 0 {
			return fmt.Errorf("testbed: limiting link %s to %d MiB/s: %w", d.veth, mibs, err)
		}
	}
	logf(b.cfg.Log, "link limited to %d MiB/s (0: none)", mibs)
	return nil
}
