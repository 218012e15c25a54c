package libvirtx

import (
	"errors"
	"fmt"
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
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("libvirt's runtime directory %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return 0, fmt.Errorf("no pid file %s: QEMU for %q is not running under that libvirt, or libvirt keeps its state elsewhere", shown, domain)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return 0, fmt.Errorf("pid file %s: a link or mount on the way, not libvirt's own file: %w", shown, err)
	case err != nil:
		return 0, fmt.Errorf("pid file %s: %w", shown, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("pid file %s: %w", shown, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("pid file %s is not a regular file", shown)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_GETLK, &lk); err != nil {
		return 0, fmt.Errorf("pid file %s: asking who holds its lock: %w", shown, err)
	}
	if lk.Type == unix.F_UNLCK {
		return 0, fmt.Errorf("pid file %s is not held by a running QEMU (stale after a crash?)", shown)
	}
	if lk.Pid <= 0 {
		return 0, fmt.Errorf("pid file %s is held by a process outside ferryd's PID namespace (ferryd needs the host PID namespace)", shown)
	}
	buf := make([]byte, 32)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", shown, err)
	}
	named, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || named != int(lk.Pid) {
		return 0, fmt.Errorf("pid file %s names %q but pid %d holds it", shown, strings.TrimSpace(string(buf[:n])), lk.Pid)
	}
	return named, nil
}
