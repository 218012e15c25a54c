package proxy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
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
	return nil
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
	if err := os.Chown(dir, -1, gid); err != nil {
		return -1, err
	}
	if err := os.Chmod(dir, socketDirMode); err != nil {
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
