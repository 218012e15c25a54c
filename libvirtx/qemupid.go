package libvirtx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/sys/unix"
)

// QEMUPID is the PID of the QEMU that the libvirt daemon behind socket runs
// for domain, as libvirt itself knows it: the pid file libvirt keeps in its
// runtime directory, which QEMU holds write-locked while it lives. The
// process is the lock's holder as the kernel reports it, not a command line
// in /proc that anyone can imitate, and the file must also name it.
//
// libvirt's runtime directory is the socket's: /run/libvirt with its qemu/
// state directory for a system daemon, a session daemon's $XDG_RUNTIME_DIR/
// libvirt with qemu/run/ (KubeVirt's launchers, whose libvirt-runtime
// emptyDir is that directory). The file is opened beneath the socket's
// directory without following a link, so a pod cannot point ferryd at a
// file elsewhere. The lock's holder is given in ferryd's PID namespace,
// hence the host PID namespace (hostPID) for QEMUs in other pods.
func QEMUPID(socket, domain string) (int, error) {
	if domain == "" || strings.ContainsRune(domain, '/') || domain == "." || domain == ".." {
		return 0, fmt.Errorf("domain name %q cannot name a pid file", domain)
	}
	rel := filepath.Join("qemu", domain+".pid")
	if driverURI(socket) == libvirt.QEMUSession {
		rel = filepath.Join("qemu", "run", domain+".pid")
	}
	dir := filepath.Dir(socket)
	shown := filepath.Join(dir, rel)
	fd, err := openPIDFile(dir, rel)
	if errors.Is(err, unix.ENOENT) {
		return 0, fmt.Errorf("no pid file %s: QEMU for %q is not running under that libvirt, or libvirt keeps its state elsewhere", shown, domain)
	}
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", shown, err)
	}
	defer unix.Close(fd)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_GETLK, &lk); err != nil {
		return 0, fmt.Errorf("pid file %s: asking who holds its lock: %w", shown, err)
	}
	buf := make([]byte, 32)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", shown, err)
	}
	content := strings.TrimSpace(string(buf[:n]))
	if lk.Type == unix.F_UNLCK {
		return 0, fmt.Errorf("pid file %s is not held by a running QEMU (stale after a crash, or a QEMU started by a libvirt older than 6.x, which did not keep it locked)", shown)
	}
	if lk.Pid <= 0 {
		return 0, fmt.Errorf("pid file %s is held by a process outside ferryd's PID namespace (ferryd needs the host PID namespace)", shown)
	}
	if content == "" {
		return 0, fmt.Errorf("pid file %s is still empty: QEMU is starting", shown)
	}
	// libvirt writes the PID as its own PID namespace numbers it: a
	// launcher pod's is not ferryd's, where the lock's holder is given.
	named, err := strconv.Atoi(content)
	if own := innermostPID(int(lk.Pid)); err != nil || named != own {
		return 0, fmt.Errorf("pid file %s names %q but pid %d (%d in its own PID namespace) holds it", shown, content, lk.Pid, own)
	}
	return int(lk.Pid), nil
}

// openPIDFile opens rel beneath dir for reading, refusing a link or a mount
// at any step, and anything but a regular file at the end: a pod writes the
// directory, and opening what it planted there (a FIFO, a device node)
// must not block ferryd or touch a device. The file is first opened as a
// bare path, checked, and only then opened for reading through that
// descriptor, so it cannot be swapped in between. openat2 would say the
// same in one call, but needs Linux 5.6 and a seccomp profile that knows it.
func openPIDFile(dir, rel string) (int, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var root unix.Stat_t
	if err := unix.Fstat(dfd, &root); err != nil {
		unix.Close(dfd)
		return -1, err
	}
	parts := strings.Split(rel, string(filepath.Separator))
	for i, part := range parts {
		fd, err := unix.Openat(dfd, part, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dfd)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		last := i == len(parts)-1
		switch {
		case st.Dev != root.Dev:
			err = fmt.Errorf("%s is on another mount, not libvirt's own", part)
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			err = fmt.Errorf("%s is a symbolic link, not libvirt's own", part)
		case !last && st.Mode&unix.S_IFMT != unix.S_IFDIR:
			err = fmt.Errorf("%s is not a directory", part)
		case last && st.Mode&unix.S_IFMT != unix.S_IFREG:
			err = fmt.Errorf("not a regular file")
		}
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
		if !last {
			dfd = fd
			continue
		}
		rfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
		unix.Close(fd)
		return rfd, err
	}
	return -1, errors.New("empty path")
}

// innermostPID is pid as its own PID namespace numbers it (the last NSpid
// entry of its status), or pid itself where the kernel does not say.
func innermostPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return pid
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
					return n
				}
			}
		}
	}
	return pid
}
