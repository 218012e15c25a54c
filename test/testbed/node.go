package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/ferry-vm/ferry/api/client"
)

// Node describes one libvirt host of the bed. LibvirtSocket and DebugSocket
// are usable from the root namespace; MetricsAddr only inside the node's netns.
type Node struct {
	Name          string
	IP            string
	LibvirtSocket string
	DebugSocket   string
	MetricsAddr   string
	// ProxyAddr is the node's migration proxy, on its veth.
	ProxyAddr string
	Dir       string
}

// ferryd serves /metrics on every address of its node, as the DaemonSet
// does: on loopback for the node itself, on the veth for the bed's Prometheus.
const (
	metricsPort = 9474
	metricsAddr = "127.0.0.1:9474"
)

// ProxyPort is where each node's ferryd runs its migration proxy, on the
// node's veth address.
const ProxyPort = 9475

func newNode(cfg Config, d nodeDef) *Node {
	dir := filepath.Join(cfg.Dir, d.name)
	return &Node{
		Name: d.name,
		IP:   d.ip,
		// libvirtd's socket stays in its runtime directory (the node's
		// /run/libvirt), beside the QEMU pid files ferryd reads, as on a
		// stock host.
		LibvirtSocket: filepath.Join(dir, "run", "libvirt", "libvirt-sock"),
		DebugSocket:   filepath.Join(dir, "sock", "ferry.sock"),
		MetricsAddr:   metricsAddr,
		ProxyAddr:     fmt.Sprintf("%s:%d", d.ip, ProxyPort),
		Dir:           dir,
	}
}

// prepareNodeDir empties the node's directory from a previous run but keeps
// cache/, where libvirt keeps QEMU capabilities: probing them again costs
// ~15 s per libvirtd start.
func prepareNodeDir(cfg Config, d nodeDef) error {
	dir := filepath.Join(cfg.Dir, d.name)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "cache" {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	for _, sub := range []string{"etc", "run/mig", "run/consoles", "lib", "log", "cache", "sock", "kubelet/pods"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"libvirtd.conf": fmt.Sprintf(`unix_sock_group = "root"
unix_sock_ro_perms = "0777"
unix_sock_rw_perms = "0770"
auth_unix_ro = "none"
auth_unix_rw = "none"
host_uuid = "%[2]s"
log_outputs = "2:file:%[1]s/libvirtd.log"
keepalive_interval = 5
keepalive_count = 5
`, dir, d.hostUUID),
		// qemu.conf as Debian ships it: QEMU runs as libvirt-qemu, libvirt
		// chowns what a guest opens and gives it back afterwards
		// (dynamic_ownership, remember_owner), uses the security driver
		// the host offers (AppArmor, SELinux or none) and gives each QEMU
		// a private /dev (namespaces). One line is the bed's: QEMU's own
		// stdout and stderr go to a file, as a stock host's virtlogd would
		// be one more daemon per node, and that log changes nothing of
		// what QEMU may open.
		// And the direct path's: QEMU's own migration TLS, with
		// certificates from the bed's CA, peers' client certificates
		// checked (libvirt's default, said here as a host would).
		"qemu.conf": "stdio_handler = \"file\"\nmigrate_tls_x509_cert_dir = \"" + QEMUTLSDirInNode + "\"\nmigrate_tls_x509_verify = 1\n",
		// A newline-only libvirt.conf is a syntax error that breaks every client.
		"libvirt.conf": "# ferry test bed: client defaults\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, "etc", name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return placeGuestImages(cfg, dir)
}

// consolesInNode is where guests' serial consoles are written, root's
// alone (not /run, where /run/lock is anyone's).
const consolesInNode = "/run/consoles"

// imagesInNode is where each node keeps the guests' kernel and initrd,
// Debian's /var/lib/libvirt/images: the same path on both nodes, as on
// hosts that share images, and out of the bed's root-only directories.
const imagesInNode = "/var/lib/libvirt/images"

// placeGuestImages copies the kernel and initrd into the node's images
// directory root-only, as a stock host keeps them: QEMU (libvirt-qemu)
// reads them only because libvirt hands them over while a guest runs.
func placeGuestImages(cfg Config, dir string) error {
	images := filepath.Join(dir, "lib", "images")
	// 0711 as Debian makes it: QEMU passes, nobody lists.
	if err := os.Mkdir(images, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(images, 0o711); err != nil {
		return err
	}
	for _, src := range []string{kernelPath(cfg.CacheDir), initrdPath(cfg.CacheDir)} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(images, filepath.Base(src)), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (b *Bed) nsenter(node string, argv ...string) ([]string, error) {
	st := b.nodeState(node)
	if st == nil || !st.Holder.alive() {
		return nil, fmt.Errorf("testbed: node %s has no live namespaces (is the bed up?)", node)
	}
	return append([]string{"nsenter", "-t", strconv.Itoa(st.Holder.PID), "-n", "-m", "--"}, argv...), nil
}

// nsenterNet enters only the node's network namespace, for processes that
// use the host's paths.
func (b *Bed) nsenterNet(node string, argv ...string) ([]string, error) {
	st := b.nodeState(node)
	if st == nil || !st.Holder.alive() {
		return nil, fmt.Errorf("testbed: node %s has no live namespaces (is the bed up?)", node)
	}
	return append([]string{"nsenter", "-t", strconv.Itoa(st.Holder.PID), "-n", "--"}, argv...), nil
}

func (b *Bed) startLibvirtd(node string) (proc, error) {
	n := b.nodes[node]
	argv, err := b.nsenter(node, "libvirtd", "-f", filepath.Join(n.Dir, "etc", "libvirtd.conf"))
	if err != nil {
		return proc{}, err
	}
	return spawn(filepath.Join(n.Dir, "libvirtd.out"), argv...)
}

func (b *Bed) waitLibvirtd(ctx context.Context, node string, p proc) error {
	n := b.nodes[node]
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		l, err := dialLibvirt(n.LibvirtSocket, 5*time.Second)
		if err == nil {
			// libvirtd answers before it has probed QEMU; the probe (seconds
			// when the capabilities cache is cold) would otherwise land in the
			// first guest start or migration and skew its timing.
			done := make(chan error, 1)
			go func() { _, err := l.ConnectGetCapabilities(); done <- err }()
			select {
			case err = <-done:
			case <-ctx.Done():
				err = ctx.Err()
			}
			l.Disconnect()
			if err != nil {
				return fmt.Errorf("testbed: libvirtd on node %s: capabilities: %w", node, err)
			}
			return nil
		}
		// An answer that is an error (e.g. no QEMU driver) will not improve by waiting.
		var lerr libvirt.Error
		if errors.As(err, &lerr) {
			return fmt.Errorf("testbed: libvirtd on node %s refuses connections: %w", node, err)
		}
		if !p.alive() {
			return fmt.Errorf("testbed: libvirtd on node %s exited: %s\n%s", node,
				tail(filepath.Join(n.Dir, "libvirtd.out"), 1500), tail(filepath.Join(n.Dir, "libvirtd.log"), 1500))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: libvirtd on node %s not answering on %s: %w (last: %v)", node, n.LibvirtSocket, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (b *Bed) startFerryd(node string) (proc, error) {
	n := b.nodes[node]
	d, _ := lookupNode(node)
	tdir := tlsDir(b.cfg.Dir, node)
	nodeArgs := b.nodeFerrydArgs(node)
	if own, caps := b.ferrydOwnArgs(); len(own) > 0 {
		bounding := "-all"
		for _, c := range caps {
			bounding += ",+" + strings.ToLower(c)
		}
		args := []string{"setpriv", "--bounding-set=" + bounding, "--inh-caps=-all", "--", b.cfg.FerrydBin}
		for _, a := range own {
			args = append(args, strings.ReplaceAll(a, "$(NODE_NAME)", node))
		}
		// Last, so it wins: the bed and its tests reach ferryd there.
		args = append(append(append(args, b.ferrydArgs()...), nodeArgs...), "--debug-socket", n.DebugSocket)
		argv, err := b.nsenter(node, args...)
		if err != nil {
			return proc{}, err
		}
		return spawn(filepath.Join(n.Dir, "ferryd.log"), argv...)
	}
	args := []string{b.cfg.FerrydBin, "--node-name", node}
	// A node told which libvirt sockets to watch (say, a glob of
	// virt-launcher-style sockets) must not also watch the real one: the
	// same domains would show up twice.
	if !namesLibvirtSockets(nodeArgs) {
		args = append(args, "--libvirt-socket", n.LibvirtSocket)
	}
	args = append(args,
		"--debug-socket", n.DebugSocket,
		"--metrics-addr", fmt.Sprintf(":%d", metricsPort),
		"--sample-interval", "1s",
		// The veth is the nodes' migration network.
		"--migration-interface", d.veth,
		"--proxy-listen", fmt.Sprintf(":%d", ProxyPort),
		"--proxy-tls-cert", filepath.Join(tdir, "tls.crt"),
		"--proxy-tls-key", filepath.Join(tdir, "tls.key"),
		"--proxy-tls-ca", filepath.Join(tdir, "ca.crt"),
		"--proxy-tls-peer-name", PeerName,
		fmt.Sprintf("--proxy-tls=%v", !b.plainProxy()),
		// Without TLS no node can be named: bare addresses it is.
		fmt.Sprintf("--migration-allow-any-target=%v", b.plainProxy()),
		"--state-dir", filepath.Join(n.Dir, "state"),
		// The guests' kernel and initrd, and their console files in a
		// directory of their own: the only local files their XML names.
		"--migration-allowed-path", imagesInNode,
		"--migration-allowed-console-dir", consolesInNode,
	)
	if !b.plainProxy() {
		// The direct path is open between the two nodes; a migration
		// takes it only when asked (--data-path direct). ferryd reads
		// the node's qemu.conf for QEMU's certificates.
		args = append(args, "--direct-peers", peerOf(node).name)
	}
	args = append(args, b.ferrydArgs()...)
	args = append(args, nodeArgs...)
	argv, err := b.nsenter(node, args...)
	if err != nil {
		return proc{}, err
	}
	return spawn(filepath.Join(n.Dir, "ferryd.log"), argv...)
}

func namesLibvirtSockets(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "libvirt-socket" || name == "libvirt-socket-glob") {
			return true
		}
	}
	return false
}

func (b *Bed) waitFerryd(ctx context.Context, node string, p proc) error {
	n := b.nodes[node]
	c := client.New(n.DebugSocket)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := c.Domains(ctx, false)
		if err == nil {
			return nil
		}
		if !p.alive() {
			return fmt.Errorf("testbed: ferryd on node %s exited: %s", node, tail(filepath.Join(n.Dir, "ferryd.log"), 2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: ferryd on node %s: GET /v1/domains on %s never returned 200 (last: %v): %s",
				node, n.DebugSocket, err, tail(filepath.Join(n.Dir, "ferryd.log"), 1500))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dialLibvirt bounds the handshake: go-libvirt itself has no timeouts, so a
// libvirtd that accepts but never answers would hang the caller forever.
func dialLibvirt(sock string, timeout time.Duration) (*libvirt.Libvirt, error) {
	conn, err := net.DialTimeout("unix", sock, timeout)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	l := libvirt.NewWithDialer(dialers.NewAlreadyConnected(conn))
	if err := l.ConnectToURI(libvirt.QEMUSystem); err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := l.ConnectGetLibVersion(); err != nil {
		l.Disconnect()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return l, nil
}
