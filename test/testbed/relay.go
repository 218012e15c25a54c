package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Each in-flight migration gets a pair of TCP ports on the target: one for
// libvirt RPC, one for the QEMU stream. Slots let migrations overlap.
const relayPortBase = 49200

// Per-guest socket paths as seen inside a node; the same path is a relay
// listener on the source node and the target QEMU's listener on the target.
func migDirInNode(guest string) string { return "/run/mig/" + guest }

func migDir(n *Node, guest string) string {
	return filepath.Join(n.Dir, "run", "mig", guest)
}

// startRelays wires KubeVirt-style proxies for one migration: unix listeners
// in the source's /run/mig/<guest>/ forward over the veth to TCP listeners on
// the target, which forward to the target's libvirt and QEMU sockets.
func (b *Bed) startRelays(guest, from, to string) (*relayState, error) {
	r, err := b.reserveRelay(guest, from, to)
	if err != nil {
		return nil, err
	}
	src, dst := b.nodes[from], b.nodes[to]
	gid := b.qemuGID()
	for _, dir := range []string{migDir(src, guest), migDir(dst, guest)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return r, err
		}
		// As virt-handler does for its relays: QEMU creates its socket
		// here on the target and connects to the relay's on the source.
		if err := os.Chown(dir, -1, gid); err != nil {
			return r, err
		}
		if err := os.Chmod(dir, 0o770); err != nil {
			return r, err
		}
		for _, s := range []string{"libvirt.sock", "qemu.sock"} {
			_ = os.Remove(filepath.Join(dir, s))
		}
	}
	srcDir := migDir(src, guest)
	specs := []relaySpec{
		{node: to, listen: fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", r.RPCPort, dst.IP), connect: "UNIX-CONNECT:" + dst.LibvirtSocket, ready: tcpListening(r.RPCPort)},
		{node: to, listen: fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", r.MigPort, dst.IP), connect: "UNIX-CONNECT:" + filepath.Join(migDir(dst, guest), "qemu.sock"), ready: tcpListening(r.MigPort)},
		{node: from, listen: "UNIX-LISTEN:" + filepath.Join(srcDir, "libvirt.sock") + ",fork,unlink-early", connect: fmt.Sprintf("TCP:%s:%d", dst.IP, r.RPCPort), ready: unixListening(filepath.Join(srcDir, "libvirt.sock"))},
		{node: from, listen: "UNIX-LISTEN:" + filepath.Join(srcDir, "qemu.sock") + ",fork,unlink-early", connect: fmt.Sprintf("TCP:%s:%d", dst.IP, r.MigPort), ready: unixListening(filepath.Join(srcDir, "qemu.sock")), qemuSocket: filepath.Join(srcDir, "qemu.sock")},
	}
	for _, s := range specs {
		if err := b.runRelay(r, s, gid); err != nil {
			return r, err
		}
	}
	return r, nil
}

// reserveRelay records a migration's relays, with a free pair of ports,
// before any of them starts.
func (b *Bed) reserveRelay(guest, from, to string) (*relayState, error) {
	r := &relayState{Guest: guest, From: from, To: to}
	err := withLock(b.cfg.Dir, func() error {
		used := map[int]bool{}
		for _, o := range loadRelays(b.cfg.Dir) {
			if o.Guest == guest {
				return fmt.Errorf("testbed: a migration of %s (%s -> %s) is already in progress", guest, o.From, o.To)
			}
			used[o.RPCPort] = true
		}
		for slot := 0; ; slot++ {
			if port := relayPortBase + 2*slot; !used[port] {
				r.RPCPort, r.MigPort = port, port+1
				break
			}
		}
		return writeJSON(relayPath(b.cfg.Dir, guest), r)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// relaySpec is one socat of a migration's relays.
type relaySpec struct {
	node            string
	listen, connect string
	ready           func(proc) bool
	// qemuSocket is a socket the source QEMU connects to, given to its group.
	qemuSocket string
	// nsPID, when set, is a process whose network and mount namespaces
	// the relay runs in (a launcher's); otherwise the node's network
	// namespace only, with root-namespace paths.
	nsPID int
}

// runRelay starts one relay, records it before waiting, and waits until
// it listens.
func (b *Bed) runRelay(r *relayState, s relaySpec, gid int) error {
	st := b.nodeState(s.node)
	if st == nil || !st.Holder.alive() {
		return fmt.Errorf("testbed: node %s has no live namespaces", s.node)
	}
	ns := []string{"-t", strconv.Itoa(st.Holder.PID), "-n"}
	if s.nsPID != 0 {
		ns = []string{"-t", strconv.Itoa(s.nsPID), "-n", "-m"}
	}
	logPath := filepath.Join(b.cfg.Dir, "relays", r.Guest+".log")
	p, err := spawn(logPath, append(append([]string{"nsenter"}, ns...), "--", "socat", s.listen, s.connect)...)
	if err == nil {
		r.Procs = append(r.Procs, p)
		err = writeJSON(relayPath(b.cfg.Dir, r.Guest), r)
	}
	if err == nil {
		err = waitFor(5*time.Second, func() bool { return s.ready(p) || !p.alive() })
		if err == nil && !p.alive() {
			err = errors.New("exited")
		}
	}
	if err == nil && s.qemuSocket != "" {
		err = giveToQEMU(s.qemuSocket, gid)
	}
	if err != nil {
		return fmt.Errorf("testbed: relay %s -> %s on node %s: %v: %s", s.listen, s.connect, s.node, err, tail(logPath, 1000))
	}
	return nil
}

// giveToQEMU lets QEMU's group connect to a relay's socket.
func giveToQEMU(path string, gid int) error {
	if err := os.Chown(path, -1, gid); err != nil {
		return err
	}
	return os.Chmod(path, 0o660)
}

func (b *Bed) qemuGID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st.QEMUGID
}

// stopRelays freezes each listener so it cannot fork while its connection
// children are found and killed, then lets it exit on SIGTERM so socat
// removes its unix socket.
func stopRelays(r *relayState) error {
	var errs []error
	for _, p := range r.Procs {
		if !p.alive() {
			continue
		}
		p.signal(syscall.SIGSTOP)
		for _, kid := range p.children() {
			errs = append(errs, kid.stop(2*time.Second))
		}
		p.signal(syscall.SIGTERM)
		p.signal(syscall.SIGCONT)
		errs = append(errs, p.stop(2*time.Second))
	}
	return errors.Join(errs...)
}

func (b *Bed) finishRelays(r *relayState) {
	if err := stopRelays(r); err != nil {
		logf(b.cfg.Log, "stopping relays of %s: %v", r.Guest, err)
	}
	_ = os.Remove(relayPath(b.cfg.Dir, r.Guest))
}

// tcpListening reads the listener's own view of its netns.
func tcpListening(port int) func(proc) bool {
	want := fmt.Sprintf(":%04X", port)
	return func(p proc) bool {
		return scanProcNet(p.PID, "tcp", func(f []string) bool {
			return len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A"
		})
	}
}

func unixListening(path string) func(proc) bool {
	return func(p proc) bool {
		return scanProcNet(p.PID, "unix", func(f []string) bool {
			return len(f) > 7 && f[7] == path && f[3] == "00010000"
		})
	}
}

func scanProcNet(pid int, table string, match func([]string) bool) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if match(strings.Fields(sc.Text())) {
			return true
		}
	}
	return false
}

func waitFor(d time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v", d)
		}
	}
	return nil
}
