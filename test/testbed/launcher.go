package testbed

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/ferry-vm/ferry/internal/unixsock"
)

// A virt-launcher pod as KubeVirt runs one (pkg/virt-controller/services,
// cmd/virt-launcher): its libvirt daemon runs as qemu (107:107) in session
// mode with XDG_RUNTIME_DIR=/var/run, so its socket is /var/run/libvirt/
// virtqemud-sock, mode 0700, owned by 107, with no authentication; the pod's
// /var/run/libvirt is the emptyDir libvirt-runtime, which the node sees
// under the kubelet's pods directory; the domain is <namespace>_<name> with
// KubeVirt's metadata, and QEMU runs as 107 too.
const (
	launcherUID = 107
	launcherGID = 107
	// kubeletPodsInNode is the kubelet's default pods directory, where a
	// node's launchers live: real length, so a launcher socket is 121 bytes.
	kubeletPodsInNode = "/var/lib/kubelet/pods"
	emptyDirs         = "volumes/kubernetes.io~empty-dir"
	// Paths inside a launcher, as KubeVirt mounts its emptyDirs.
	launcherRuntime = "/var/run/libvirt"
	launcherPublic  = "/var/run/kubevirt"
	launcherPrivate = "/var/run/kubevirt-private"
	// MigrationProxyDir is where virt-handler puts a launcher's migration
	// sockets (pkg/virt-handler/migration-proxy), inside the launcher.
	MigrationProxyDir = launcherPublic + "/migrationproxy"
)

// LauncherSpec describes one virt-launcher pod. A launcher with MemoryMiB
// set runs the VMI's guest; one without is a migration target, as KubeVirt
// starts the target pod empty.
type LauncherSpec struct {
	Node string
	// Namespace and Name are the VMI's; the domain is Namespace_Name.
	Namespace, Name string
	// VMIUID is the VMI's UID, written into the domain's KubeVirt metadata.
	VMIUID string
	// PodUID is the launcher pod's UID; empty makes a random one.
	PodUID                             string
	MemoryMiB, DirtyMiB, DirtyRateMiBs int
	// Stack is the libvirt and QEMU the pod runs (stack.go), as a
	// virt-launcher image brings its own: empty or default, the node's.
	Stack string
}

// Launcher is a running virt-launcher pod of the bed.
type Launcher struct {
	Node   string
	PodUID string
	Domain string
	VMIUID string
	// Socket is the launcher's libvirt socket as the node (and ferryd)
	// sees it: /var/lib/kubelet/pods/<pod UID>/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock.
	Socket string
	// Daemon is the libvirt daemon the launcher runs: virtqemud where the
	// host has it, else libvirtd (Debian ships no virtqemud; the RPC is the
	// same, and its socket is given virtqemud-sock's name too).
	Daemon string

	// Stack is the libvirt and QEMU the pod runs, "" for the node's.
	Stack string

	bed    *Bed
	podDir string // the pod's directory as the root namespace sees it
	// cgroups hold the pod's processes (see podCgroups).
	cgroups []string
	daemon  proc
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func (s LauncherSpec) check() error {
	if _, err := lookupNode(s.Node); err != nil {
		return err
	}
	if !dnsLabel.MatchString(s.Namespace) || !dnsLabel.MatchString(s.Name) {
		return fmt.Errorf("testbed: launcher %q/%q: namespace and name must be DNS labels, as a VMI's are", s.Namespace, s.Name)
	}
	if err := checkGuestName(s.Namespace + "_" + s.Name); err != nil {
		return err
	}
	if s.VMIUID == "" {
		return fmt.Errorf("testbed: launcher of %s/%s: no VMI UID for the domain's KubeVirt metadata", s.Namespace, s.Name)
	}
	if s.PodUID != "" {
		if _, err := uuid.Parse(s.PodUID); err != nil || len(s.PodUID) != 36 {
			return fmt.Errorf("testbed: launcher pod UID %q is not a 36-character UUID", s.PodUID)
		}
	}
	if s.MemoryMiB > 0 {
		return GuestSpec{Name: s.Namespace + "_" + s.Name, Node: s.Node, MemoryMiB: s.MemoryMiB, DirtyMiB: s.DirtyMiB, DirtyRateMiBs: s.DirtyRateMiBs}.check()
	}
	return nil
}

// StartLauncher lays out a launcher pod under the node's kubelet pods
// directory, starts its libvirt daemon as 107 in session mode in the pod's
// own mount namespace, and, when the spec has a guest, defines and starts
// the VMI's domain and waits until its dirtier is READY.
func (b *Bed) StartLauncher(ctx context.Context, s LauncherSpec) (*Launcher, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.Stack != "" && s.Stack != StackDefault {
		if _, ok := stackDefs[s.Stack]; !ok {
			return nil, fmt.Errorf("testbed: launcher stack %q: unknown (oldest or newest)", s.Stack)
		}
		if err := ensureStack(ctx, b.cfg, s.Stack); err != nil {
			return nil, err
		}
	}
	if s.PodUID == "" {
		s.PodUID = uuid.NewString()
	}
	n := b.nodes[s.Node]
	l := &Launcher{
		Node: s.Node, PodUID: s.PodUID, Domain: s.Namespace + "_" + s.Name, VMIUID: s.VMIUID,
		Socket: filepath.Join(kubeletPodsInNode, s.PodUID, emptyDirs, "libvirt-runtime", "virtqemud-sock"),
		Stack:  s.Stack, bed: b, podDir: filepath.Join(n.Dir, "kubelet", "pods", s.PodUID),
	}
	l.Daemon = "libvirtd"
	if l.hasVirtqemud() {
		l.Daemon = "virtqemud"
	}
	if err := l.layOut(); err != nil {
		l.Stop()
		return nil, err
	}
	if err := l.start(ctx); err != nil {
		// A daemon that started but never answered must not stay in the
		// node's launcher glob for the tests after this one.
		l.Stop()
		return nil, err
	}
	logf(b.cfg.Log, "launcher pod %s on node %s: %s as %d:%d in session mode at %s (%d bytes), stack %s",
		l.PodUID, l.Node, l.Daemon, launcherUID, launcherGID, l.Socket, len(l.Socket), cmp.Or(l.Stack, "the node's"))
	if s.MemoryMiB == 0 {
		return l, nil
	}
	if err := l.startGuest(ctx, s); err != nil {
		l.Stop()
		return nil, err
	}
	return l, nil
}

func (l *Launcher) volume(name string) string { return filepath.Join(l.podDir, emptyDirs, name) }

// hasVirtqemud says whether the pod's stack ships virtqemud.
func (l *Launcher) hasVirtqemud() bool {
	if l.Stack != "" && l.Stack != StackDefault {
		_, err := os.Stat(filepath.Join(stackRoot(l.bed.cfg.CacheDir, l.Stack), "usr", "sbin", "virtqemud"))
		return err == nil
	}
	_, err := exec.LookPath("virtqemud")
	return err == nil
}

// PID is the launcher's libvirt daemon's, whose namespaces are the pod's.
func (l *Launcher) PID() int { return l.daemon.PID }

// hostSocket is the launcher's socket from the root namespace, where the
// bed itself dials it.
func (l *Launcher) hostSocket() string {
	return filepath.Join(l.volume("libvirt-runtime"), "virtqemud-sock")
}

// ConsolePath is the guest's serial console file, from the root namespace.
func (l *Launcher) ConsolePath() string { return filepath.Join(l.volume("private"), "console.log") }

// layOut makes the pod's emptyDirs (owned by 107, as KubeVirt's fsGroup
// makes them usable to the launcher), a private passwd naming 107 as the
// launcher image does, the daemon's configuration, and the guest's kernel
// and initrd in the pod's own files, the same path in every launcher.
func (l *Launcher) layOut() error {
	if err := os.MkdirAll(l.podDir, 0o750); err != nil {
		return err
	}
	for _, v := range []string{"libvirt-runtime", "public/migrationproxy", "private/home", "private/config/libvirt"} {
		if err := os.MkdirAll(l.volume(v), 0o755); err != nil {
			return err
		}
	}
	conf := fmt.Sprintf(`host_uuid = "%s"
log_outputs = "2:file:%s/libvirtd.log"
keepalive_interval = 5
keepalive_count = 5
`, uuid.NewString(), launcherPrivate)
	files := map[string]struct {
		body string
		mode os.FileMode
	}{
		"private/libvirtd.conf": {conf, 0o644},
		// No virtlogd in a launcher's session: QEMU's output to a file.
		"private/config/libvirt/qemu.conf": {"stdio_handler = \"file\"\n", 0o644},
		"private/console.log":              {"", 0o644},
	}
	for name, f := range files {
		if err := os.WriteFile(l.volume(name), []byte(f.body), f.mode); err != nil {
			return err
		}
	}
	for _, src := range []string{kernelPath(l.bed.cfg.CacheDir), initrdPath(l.bed.cfg.CacheDir)} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(l.volume(filepath.Join("private", filepath.Base(src))), b, 0o600); err != nil {
			return err
		}
	}
	if err := chownTree(filepath.Join(l.podDir, emptyDirs), launcherUID, launcherGID); err != nil {
		return err
	}
	for _, dev := range launcherDevices {
		if err := ownedDevice(filepath.Join(l.podDir, dev), "/dev/"+dev); err != nil {
			return err
		}
	}
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return err
	}
	group, err := os.ReadFile("/etc/group")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(l.podDir, "passwd"), append(dropID(passwd, 2, launcherUID), fmt.Sprintf("qemu:x:%d:%d:qemu user:%s/home:/sbin/nologin\n", launcherUID, launcherGID, launcherPrivate)...), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(l.podDir, "group"), append(dropID(group, 2, launcherGID), fmt.Sprintf("qemu:x:%d:\n", launcherGID)...), 0o644); err != nil {
		return err
	}
	// The shared capabilities cache of the node's launchers, kept across
	// beds: a cold probe costs ~15 s per daemon start.
	cache := l.cacheDir()
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	return chownTree(cache, launcherUID, launcherGID)
}

// The launchers' cache as the node sees it (the bed's own directory is
// root's alone): the node's cache/, which Up keeps.
const launcherCacheInNode = "/var/cache/libvirt/launcher"

func (l *Launcher) cacheDir() string {
	return filepath.Join(l.bed.nodes[l.Node].Dir, "cache", "launcher")
}

// launcherDevices are the host devices a launcher's QEMU opens as 107:
// /dev/kvm (KubeVirt's device plugin hands it over) and /dev/userfaultfd,
// which post-copy needs on the target where vm.unprivileged_userfaultfd is
// 0, the kernel's default (kubevirt#17780: the sysctl, or the device given
// to the pod, as containerd's device_ownership_from_security_context does).
var launcherDevices = []string{"kvm", "userfaultfd"}

// ownedDevice makes a node for the host device at host, owned by the
// launcher's user, for the launcher to mount over it; none if the host has
// no such device.
func ownedDevice(node, host string) error {
	fi, err := os.Stat(host)
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	_ = os.Remove(node)
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(fi.Sys().(*syscall.Stat_t).Rdev)); err != nil {
		return err
	}
	return os.Chown(node, launcherUID, launcherGID)
}

// dropID removes the lines of a passwd or group file whose field idx is id.
func dropID(file []byte, idx, id int) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(file, []byte("\n")) {
		if f := strings.Split(string(line), ":"); len(f) > idx && f[idx] == fmt.Sprint(id) {
			continue
		}
		out = append(out, line...)
	}
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return out
}

func chownTree(root string, uid, gid int) error {
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// start runs the daemon in the pod's mount namespace (inside the node's),
// where the emptyDirs sit at KubeVirt's paths and /etc/passwd is the
// image's, and waits until it answers on its socket.
func (l *Launcher) start(ctx context.Context) error {
	var err error
	if l.cgroups, err = podCgroups(l.PodUID); err != nil {
		return err
	}
	script := fmt.Sprintf(`set -e
for g in %[11]s; do echo $$ > $g/cgroup.procs; done
mkdir -p %[2]s %[3]s %[4]s
mount --bind %[1]s/libvirt-runtime %[2]s
mount --bind %[1]s/public %[3]s
mount --bind %[1]s/private %[4]s
mount --bind %[5]s/passwd /etc/passwd
mount --bind %[5]s/group /etc/group
for dev in %[10]s; do
  if [ -e %[5]s/$dev ]; then mount --bind %[5]s/$dev /dev/$dev; fi
done
%[12]sexec setpriv --reuid=%[6]d --regid=%[7]d --clear-groups env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=%[4]s/home XDG_RUNTIME_DIR=/var/run XDG_CONFIG_HOME=%[4]s/config XDG_CACHE_HOME=%[8]s \
  %[9]s -f %[4]s/libvirtd.conf
`, filepath.Join(l.podDir, emptyDirs), launcherRuntime, launcherPublic, launcherPrivate, l.podDir,
		launcherUID, launcherGID, launcherCacheInNode, l.Daemon, strings.Join(launcherDevices, " "), strings.Join(l.cgroups, " "),
		stackMounts(l.bed.cfg.CacheDir, cmp.Or(l.Stack, StackDefault)))
	argv, err := l.bed.nsenter(l.Node, "unshare", "-m", "--propagation", "private", "sh", "-c", script)
	if err != nil {
		return err
	}
	logPath := filepath.Join(l.podDir, "launcher.log")
	if l.daemon, err = spawn(logPath, argv...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	own := filepath.Join(l.volume("libvirt-runtime"), l.Daemon+"-sock")
	if l.Daemon == "libvirtd" {
		own = filepath.Join(l.volume("libvirt-runtime"), "libvirt-sock")
	}
	for {
		if fi, err := os.Lstat(own); err == nil && fi.Mode().Type() == os.ModeSocket {
			break
		}
		if !l.daemon.alive() {
			return fmt.Errorf("testbed: launcher %s on node %s: %s exited: %s\n%s", l.PodUID, l.Node, l.Daemon,
				tail(logPath, 1500), tail(l.volume("private/libvirtd.log"), 1500))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: launcher %s on node %s: no socket %s: %w", l.PodUID, l.Node, own, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if l.Daemon == "libvirtd" {
		// The same socket under virtqemud's name, where KubeVirt's is: a
		// hard link names the same inode (owner 107, mode 0700).
		if err := os.Link(own, l.hostSocket()); err != nil {
			return fmt.Errorf("testbed: launcher %s: naming its socket virtqemud-sock: %w", l.PodUID, err)
		}
	}
	// The socket is bound before the daemon listens: on a busy machine a
	// first dial can be refused.
	c, err := l.Libvirt()
	for err != nil && errors.Is(err, syscall.ECONNREFUSED) && l.daemon.alive() && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		c, err = l.Libvirt()
	}
	if err != nil {
		return err
	}
	defer c.Disconnect()
	// Probed QEMU now, not in the first guest start or migration.
	done := make(chan error, 1)
	go func() { _, err := c.ConnectGetCapabilities(); done <- err }()
	select {
	case err = <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("testbed: launcher %s on node %s: capabilities: %w", l.PodUID, l.Node, ctx.Err())
	}
}

// Libvirt connects to the launcher's daemon through its socket, as root
// (DAC_OVERRIDE passes its 0700), asking for the session driver it serves.
func (l *Launcher) Libvirt() (*libvirt.Libvirt, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := unixsock.Dial(ctx, l.hostSocket())
	if err != nil {
		return nil, fmt.Errorf("testbed: launcher %s on node %s: %w", l.PodUID, l.Node, err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	c := libvirt.NewWithDialer(dialers.NewAlreadyConnected(conn))
	if err := c.ConnectToURI(libvirt.QEMUSession); err != nil {
		conn.Close()
		return nil, fmt.Errorf("testbed: launcher %s on node %s: %w", l.PodUID, l.Node, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return c, nil
}

// domainXML is the bed's guest as KubeVirt would define it: the VMI's
// name and UID in KubeVirt's metadata, the kernel and console in the pod.
func (l *Launcher) domainXML(s LauncherSpec) string {
	return l.bed.guestXML(guestDomain{name: l.Domain, memoryMiB: s.MemoryMiB, dirtyMiB: s.DirtyMiB, dirtyRate: s.DirtyRateMiBs,
		kernel: launcherPrivate + "/vmlinuz", initrd: launcherPrivate + "/initrd.gz", console: launcherPrivate + "/console.log", vmiUID: s.VMIUID})
}

// startGuest defines the domain persistently and starts it, as
// virt-launcher does, and waits for the dirtier's READY on the console.
func (l *Launcher) startGuest(ctx context.Context, s LauncherSpec) error {
	c, err := l.Libvirt()
	if err != nil {
		return err
	}
	defer c.Disconnect()
	t0 := time.Now()
	dom, err := c.DomainDefineXML(l.domainXML(s))
	if err != nil {
		return fmt.Errorf("testbed: defining %s in launcher %s: %w", l.Domain, l.PodUID, err)
	}
	if err := c.DomainCreate(dom); err != nil {
		return fmt.Errorf("testbed: starting %s in launcher %s: %w", l.Domain, l.PodUID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		if out, _ := os.ReadFile(l.ConsolePath()); bytes.Contains(out, []byte("READY")) {
			logf(l.bed.cfg.Log, "guest %s READY in launcher %s on node %s after %.1fs", l.Domain, l.PodUID, l.Node, time.Since(t0).Seconds())
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: guest %s in launcher %s not READY: %w; console tail:\n%s", l.Domain, l.PodUID, ctx.Err(), tail(l.ConsolePath(), 2000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// State is the domain's state and reason in the launcher's libvirt.
func (l *Launcher) State() (state, reason int32, err error) {
	c, err := l.Libvirt()
	if err != nil {
		return 0, 0, err
	}
	defer c.Disconnect()
	dom, err := c.DomainLookupByName(l.Domain)
	if err != nil {
		return 0, 0, err
	}
	return c.DomainGetState(dom, 0)
}

// Stop destroys the launcher's domain, stops its daemon and any QEMU it
// left, and removes the pod's directory, as the kubelet does when the pod
// goes.
func (l *Launcher) Stop() error {
	var errs []error
	if c, err := l.Libvirt(); err == nil {
		if dom, err := c.DomainLookupByName(l.Domain); err == nil {
			if st, reason, err := c.DomainGetState(dom, 0); err == nil && st == int32(libvirt.DomainRunning) &&
				reason == int32(libvirt.DomainRunningPostcopyFailed) {
				// Blocked on pages that never come: SIGTERM would wait 10 s.
				l.killQEMU()
			}
			if err := c.DomainDestroy(dom); err != nil && !isNoDomain(err) && !isNotRunning(err) {
				errs = append(errs, err)
			}
			_ = c.DomainUndefine(dom)
		}
		c.Disconnect()
	}
	l.killQEMU()
	if l.daemon.PID != 0 {
		errs = append(errs, l.daemon.stop(15*time.Second))
	}
	errs = append(errs, os.RemoveAll(l.podDir), removePodCgroups(l.cgroups))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testbed: stopping launcher %s on node %s: %w", l.PodUID, l.Node, err)
	}
	return nil
}

// qemu is the launcher's QEMU, found from the pidfile its session daemon
// keeps in the pod's runtime directory.
func (l *Launcher) qemu() (proc, bool) {
	pidfile := filepath.Join(l.volume("libvirt-runtime"), "qemu", "run", l.Domain+".pid")
	return pidFileProc(pidfile, "qemu-system", "guest="+l.Domain)
}

// QEMUPID is the process ID of the launcher's QEMU.
func (l *Launcher) QEMUPID() (int, error) {
	if p, ok := l.qemu(); ok && p.alive() {
		return p.PID, nil
	}
	return 0, fmt.Errorf("testbed: launcher %s on node %s runs no QEMU", l.PodUID, l.Node)
}

func (l *Launcher) killQEMU() {
	if p, ok := l.qemu(); ok {
		p.signal(syscall.SIGKILL)
		p.waitGone(5 * time.Second)
	}
}
