package libvirtx

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain: a child started by holdLocked holds a file write-locked, as
// QEMU holds libvirt's pid file, until it is killed.
func TestMain(m *testing.M) {
	if path := os.Getenv("FERRY_LOCK_PIDFILE"); path != "" {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err == nil {
			lk := unix.Flock_t{Type: unix.F_WRLCK}
			err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
		}
		if err != nil {
			os.Stdout.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		if os.Getenv("FERRY_LOCK_WRITE_PID") == "1" {
			// As libvirt writes it: the PID its own namespace gives it.
			f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0)
		}
		os.Stdout.WriteString("locked\n")
		select {}
	}
	os.Exit(m.Run())
}

// holdLocked starts a process holding path write-locked, as QEMU does.
func holdLocked(t *testing.T, path string) int {
	t.Helper()
	return holdLockedBy(t, exec.Command(os.Args[0]), path)
}

// holdLockedBy runs cmd (the test binary, perhaps wrapped) as the holder.
func holdLockedBy(t *testing.T, cmd *exec.Cmd, path string, env ...string) int {
	t.Helper()
	cmd.Env = append(append(os.Environ(), "FERRY_LOCK_PIDFILE="+path), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		t.Fatalf("lock holder said %q", line)
	}
	return cmd.Process.Pid
}

// A virt-launcher pod has its own PID namespace: libvirt writes QEMU's PID
// as that namespace numbers it, while the lock's holder is given in
// ferryd's (the host's). QEMUPID must match the two.
func TestQEMUPIDOfAQEMUInItsOwnPIDNamespace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("makes a PID namespace: run as root (make test does)")
	}
	const dom = "ns1_vm1"
	socket, state := libvirtRuntime(t, os.Getuid())
	pidfile := filepath.Join(state, dom+".pid")
	// unshare forks the holder into a new PID namespace, where it is 1.
	unshare := holdLockedBy(t, exec.Command("unshare", "--pid", "--fork", "--kill-child", os.Args[0]), pidfile, "FERRY_LOCK_WRITE_PID=1")
	b, _ := os.ReadFile(pidfile)
	got, err := QEMUPID(socket, dom)
	if err != nil || got == unshare || innermostPID(got) != 1 || string(b) != "1" {
		t.Fatalf("QEMUPID = %d, %v (file says %q); want the holder's host PID, which is 1 in its namespace", got, err, b)
	}
}

// decoy runs a process whose command line is QEMU's for domain, as any
// local user or pod can.
func decoy(t *testing.T, domain string) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 600; :", "qemu-system-x86_64", "-name", "guest="+domain+",debug-threads=on")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// libvirtRuntime lays out a daemon's runtime directory: its socket and the
// QEMU state directory beside it, system or session as the socket's owner
// makes it.
func libvirtRuntime(t *testing.T, owner int) (socket, state string) {
	t.Helper()
	dir := t.TempDir()
	socket = filepath.Join(dir, "virtqemud-sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if owner != os.Getuid() {
		if err := os.Lchown(socket, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	state = filepath.Join(dir, "qemu")
	if owner != 0 {
		state = filepath.Join(state, "run")
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	return socket, state
}

func writePIDFile(t *testing.T, path string, pid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestQEMUPIDIsTheHolderOfLibvirtsPIDFileNotACommandLine(t *testing.T) {
	owners := []int{os.Getuid()}
	if os.Getuid() == 0 {
		owners = []int{0, 107} // a host's libvirtd and a KubeVirt launcher's
	}
	for _, owner := range owners {
		const dom = "ns1_vm1"
		// The look-alike starts first, so a scan of /proc meets it first.
		fake := decoy(t, dom)
		socket, state := libvirtRuntime(t, owner)
		pidfile := filepath.Join(state, dom+".pid")
		writePIDFile(t, pidfile, 0)
		qemu := holdLocked(t, pidfile)
		writePIDFile(t, pidfile, qemu)
		got, err := QEMUPID(socket, dom)
		if err != nil || got != qemu {
			t.Fatalf("owner %d: QEMUPID = %d, %v; want the lock holder %d (the look-alike is %d)", owner, got, err, qemu, fake)
		}
	}
}

func TestQEMUPIDRefusals(t *testing.T) {
	const dom = "ns1_vm1"
	cases := []struct {
		name string
		lay  func(t *testing.T, socket, state string)
		want string
	}{
		{"no pid file", func(t *testing.T, socket, state string) {}, "no pid file"},
		{"stale pid file", func(t *testing.T, socket, state string) {
			writePIDFile(t, filepath.Join(state, dom+".pid"), os.Getpid())
		}, "not held by a running QEMU"},
		{"file names another process", func(t *testing.T, socket, state string) {
			p := filepath.Join(state, dom+".pid")
			holdLocked(t, p)
			writePIDFile(t, p, os.Getpid())
		}, "but pid"},
		{"pid file is a link", func(t *testing.T, socket, state string) {
			elsewhere := filepath.Join(t.TempDir(), "x.pid")
			writePIDFile(t, elsewhere, holdLocked(t, elsewhere))
			if err := os.Symlink(elsewhere, filepath.Join(state, dom+".pid")); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"pid file is a link within the directory", func(t *testing.T, socket, state string) {
			other := filepath.Join(state, "other.pid")
			writePIDFile(t, other, holdLocked(t, other))
			if err := os.Symlink("other.pid", filepath.Join(state, dom+".pid")); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"pid file is a FIFO", func(t *testing.T, socket, state string) {
			// Opening it for reading would block ferryd until a writer came.
			if err := unix.Mkfifo(filepath.Join(state, dom+".pid"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"pid file still empty", func(t *testing.T, socket, state string) {
			p := filepath.Join(state, dom+".pid")
			holdLocked(t, p)
			writePIDFile(t, p, 0)
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
		}, "QEMU is starting"},
		{"state directory is a link", func(t *testing.T, socket, state string) {
			elsewhere := t.TempDir()
			p := filepath.Join(elsewhere, dom+".pid")
			writePIDFile(t, p, holdLocked(t, p))
			if err := os.RemoveAll(state); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, state); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			socket, state := libvirtRuntime(t, os.Getuid())
			tc.lay(t, socket, state)
			pid, err := QEMUPID(socket, dom)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("QEMUPID = %d, %v; want an error saying %q", pid, err, tc.want)
			}
		})
	}
	socket, _ := libvirtRuntime(t, os.Getuid())
	for _, bad := range []string{"", "..", "../../etc/x", "a/b"} {
		if _, err := QEMUPID(socket, bad); err == nil || !strings.Contains(err.Error(), "cannot name a pid file") {
			t.Errorf("domain %q: %v, want a refusal of the name", bad, err)
		}
	}
}
