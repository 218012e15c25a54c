package proxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// socketDirMode lets QEMU's group create its listening socket here (write)
// and reach a socket by name (search), but not list the directory: socket
// names carry the target's secret migration id. Sticky, so a QEMU cannot
// remove a socket it did not create. Nobody else gets in.
const socketDirMode = os.ModeDir | os.ModeSticky | 0o730

// sourceSocketMode lets the source QEMU, by its group, connect.
const sourceSocketMode = 0o660

// groupTimeout bounds learning QEMU's group from libvirt.
const groupTimeout = 10 * time.Second

// makeSocketDir creates the socket dir root-only until QEMU's group is
// known; its parents must let QEMU through, so they are created like /run.
func makeSocketDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	fd, err := openOwnDir(dir)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// openOwnDir opens the socket dir only if it is a directory of ferryd's
// own user that nobody else may write, not a link to one: ferryd later
// gives it to QEMU's group, and a link planted there beforehand would hand
// over whatever it points to.
func openOwnDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%s is not a directory of its own (a link, or a file): refusing to use it", dir)
		}
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o002 != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("%s belongs to uid %d with mode %o, not to ferryd's uid %d with no write for others: refusing to use it", dir, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	return fd, nil
}

// socketGroup returns the group QEMU runs with, -1 when none was
// configured (QEMU runs as root), and the first time it is known hands it
// the socket dir.
func (p *Proxy) socketGroup() (int, error) {
	if p.cfg.SocketGroup == nil {
		return -1, nil
	}
	p.groupMu.Lock()
	defer p.groupMu.Unlock()
	if p.group >= 0 {
		return p.group, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	gid, err := p.cfg.SocketGroup(ctx)
	if err != nil {
		return -1, &unknownGroupError{err}
	}
	dir := p.cfg.SocketDir
	if err := reachable(filepath.Dir(dir), gid); err != nil {
		return -1, err
	}
	// On the directory checked, through its descriptor: it cannot be
	// swapped for a link in between.
	fd, err := openOwnDir(dir)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, -1, gid); err != nil {
		return -1, err
	}
	if err := unix.Fchmod(fd, unix.S_ISVTX|uint32(socketDirMode.Perm())); err != nil {
		return -1, err
	}
	p.group = gid
	p.log.Info("migration sockets open to QEMU's group", zap.String("dir", dir), zap.Int("gid", gid), zap.Stringer("mode", socketDirMode))
	return gid, nil
}

// unknownGroupError says the group QEMU runs with could not be learned
// (libvirt down, say); unlike the socket dir's own errors it names no
// local path.
type unknownGroupError struct{ err error }

func (e *unknownGroupError) Error() string {
	return "learning the group QEMU runs with: " + e.err.Error()
}
func (e *unknownGroupError) Unwrap() error { return e.err }

// reachable checks that a process of group gid may search every directory
// down to dir, which QEMU must to reach its sockets.
func reachable(dir string, gid int) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		perm := fi.Mode().Perm()
		if !(perm&0o001 != 0 || (ok && int(st.Gid) == gid && perm&0o010 != 0)) {
			return fmt.Errorf("QEMU (group %d) cannot pass %s (mode %v, group %d): the socket dir's parents must be searchable", gid, d, perm, st.Gid)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// giveSourceSocket lets the source QEMU connect to a socket Ferry listens on.
func giveSourceSocket(path string, gid int) error {
	if gid < 0 {
		return os.Chmod(path, 0o600)
	}
	if err := os.Chown(path, -1, gid); err != nil {
		return err
	}
	return os.Chmod(path, sourceSocketMode)
}
