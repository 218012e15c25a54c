package testbed

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

type nodeDef struct {
	name, netns, veth, ip, hostUUID string
}

var nodeDefs = []nodeDef{
	{"a", "ferry-a", "fa", "10.77.0.1", "11111111-1111-4111-8111-111111111111"},
	{"b", "ferry-b", "fb", "10.77.0.2", "22222222-2222-4222-8222-222222222222"},
}

func lookupNode(name string) (nodeDef, error) {
	for _, d := range nodeDefs {
		if d.name == name {
			return d, nil
		}
	}
	return nodeDef{}, fmt.Errorf("testbed: unknown node %q (nodes are \"a\" and \"b\")", name)
}

func peerOf(name string) nodeDef {
	if name == "a" {
		return nodeDefs[1]
	}
	return nodeDefs[0]
}

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

func createNetwork(ctx context.Context) error {
	a, b := nodeDefs[0], nodeDefs[1]
	steps := [][]string{
		{"netns", "add", a.netns},
		{"netns", "add", b.netns},
		{"link", "add", a.veth, "netns", a.netns, "type", "veth", "peer", "name", b.veth, "netns", b.netns},
	}
	for _, d := range nodeDefs {
		steps = append(steps,
			[]string{"-n", d.netns, "addr", "add", d.ip + "/24", "dev", d.veth},
			[]string{"-n", d.netns, "link", "set", "lo", "up"},
			[]string{"-n", d.netns, "link", "set", d.veth, "up"})
	}
	for _, s := range steps {
		if err := run(ctx, "ip", s...); err != nil {
			return err
		}
	}
	return nil
}

func deleteNetwork(ctx context.Context) error {
	var errs []string
	for _, d := range nodeDefs {
		if netnsExists(d.netns) {
			if err := run(ctx, "ip", "netns", "del", d.netns); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// startHolder creates the node's private mount namespace inside its network
// namespace and keeps both alive with a sleeping process, so libvirtd and
// ferryd can each be restarted into them with nsenter.
func startHolder(cfg Config, d nodeDef) (proc, error) {
	dir := filepath.Join(cfg.Dir, d.name)
	kvm, err := stockKVMNode(dir)
	if err != nil {
		return proc{}, err
	}
	script := fmt.Sprintf(`set -e
mount --bind %[1]s/etc /etc/libvirt
mount --bind %[1]s/run /run
for d in lib log cache; do
  mount -t tmpfs tmpfs /var/$d
  mkdir /var/$d/libvirt
  mount --bind %[1]s/$d /var/$d/libvirt
done
mkdir /var/lib/kubelet
mount --bind %[1]s/kubelet /var/lib/kubelet
`, dir)
	if kvm != "" {
		script += "mount --bind " + kvm + " /dev/kvm\n"
	}
	// Last: the shell runs on from the host's /usr until it is replaced.
	script += stackMounts(cfg.CacheDir, cfg.stackOf(d.name))
	script += "exec sleep infinity"
	// nsenter rather than "ip netns exec": the latter mounts a fresh sysfs
	// without the host's cgroup hierarchies, which ferryd reads QEMU's CPU
	// figures from (as a DaemonSet does through a hostPath).
	return spawn(filepath.Join(dir, "holder.log"), "nsenter", "--net=/run/netns/"+d.netns, "unshare", "-m", "--propagation", "private", "sh", "-c", script)
}

// waitHolder returns once the holder's mounts are in place, i.e. its shell has become sleep.
func waitHolder(cfg Config, d nodeDef, p proc) error {
	logPath := filepath.Join(cfg.Dir, d.name, "holder.log")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !p.alive() {
			return fmt.Errorf("testbed: node %s namespace setup failed: %s", d.name, tail(logPath, 2000))
		}
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.PID)); strings.TrimSpace(string(comm)) == "sleep" {
			return nil
		}
	}
	return fmt.Errorf("testbed: node %s namespace setup did not finish in 10s: %s", d.name, tail(logPath, 2000))
}

// Commands the bed runs inside a node's netns; a stray one can only be ours.
var bedComms = map[string]bool{"sleep": true, "sh": true, "ip": true, "unshare": true, "nsenter": true, "libvirtd": true, "virtqemud": true, "setpriv": true, "socat": true, "qemu-system-x86": true, "prometheus": true}

// strayProcs finds bed processes left in the node's netns whose PID never
// made it into the state file (a crash between starting and recording them).
func strayProcs(netns string, extraComm string) []proc {
	want, err := os.Stat(filepath.Join("/run/netns", netns))
	if err != nil {
		return nil
	}
	wantIno := want.Sys().(*syscall.Stat_t).Ino
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fi, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil || fi.Sys().(*syscall.Stat_t).Ino != wantIno {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		c := strings.TrimSpace(string(comm))
		if !bedComms[c] && (extraComm == "" || c != extraComm) {
			continue
		}
		if p, err := procOf(pid); err == nil && p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// DialNode opens a TCP connection from inside a node's network namespace,
// as a process on that node would: the bed's host has no route into it.
func (b *Bed) DialNode(ctx context.Context, node, addr string) (net.Conn, error) {
	d, err := lookupNode(node)
	if err != nil {
		return nil, err
	}
	// The socket is made in the namespace of the thread that makes it.
	// A thread that cannot go back stays locked, and Go ends it with
	// this goroutine rather than run other code in the node's namespace.
	runtime.LockOSThread()
	host, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer host.Close()
	ns, err := netns.GetFromName(d.netns)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer func() {
		if netns.Set(host) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
}
