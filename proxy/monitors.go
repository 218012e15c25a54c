package proxy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A post-copy target QEMU creates Ferry's QMP monitor socket in the socket
// dir, which QEMU's group may write: any QEMU of the node could reach it
// there, and its name shows in QEMU's command line. Once Prepare has
// returned, the proxy moves it into a directory only ferryd's user may
// enter. QEMU keeps listening: a renamed socket is the same socket.

// monitorDirName is that directory, inside the socket dir (one filesystem,
// so a rename moves the socket).
const monitorDirName = ".monitors"

// monitorKeep is how long a monitor outlives the QEMU that made it, at
// most: past it nothing would resume the migration.
const monitorKeep = outcomeKeep

// HiddenMonitorPath is where a migration's monitor is kept once moved.
func HiddenMonitorPath(dir, id string) string {
	return filepath.Join(dir, monitorDirName, id+"-qmp.sock")
}

// maxSocketPath is what a unix socket's path may hold (sun_path).
const maxSocketPath = 107

// monitorPathFits says whether a monitor's moved path fits a socket
// address, which ferryd must connect to.
func monitorPathFits(socketDir string) error {
	if n := len(HiddenMonitorPath(socketDir, newMigrationID())); n > maxSocketPath {
		return fmt.Errorf("--proxy-socket-dir %s is too long: a QEMU monitor's path in it is %d bytes, over the %d a unix socket takes (post-copy recovery needs it)", socketDir, n, maxSocketPath)
	}
	return nil
}

// makeMonitorDir creates the monitor directory as ferryd's own and no one
// else's; one a QEMU made in its place beforehand is set aside.
func makeMonitorDir(socketDir string) error {
	dir := filepath.Join(socketDir, monitorDirName)
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == os.Geteuid() && st.Mode&0o077 == 0 {
			return nil
		}
		if err := os.Rename(dir, fmt.Sprintf("%s.bad-%d", dir, time.Now().UnixNano())); err != nil {
			return fmt.Errorf("%s is not ferryd's own directory, and cannot be set aside: %w", dir, err)
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	fd, err := openOwnDir(dir)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// hideMonitor moves migration in's monitor socket out of QEMU's reach;
// one that is not a socket QEMU made (a link, a file) is removed instead.
func (p *Proxy) hideMonitor(in IncomingMigration) {
	if in.MonitorPath == "" {
		return
	}
	var st unix.Stat_t
	dst := HiddenMonitorPath(p.cfg.SocketDir, in.ID)
	err := unix.Lstat(in.MonitorPath, &st)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		if err = os.Rename(in.MonitorPath, dst); err == nil {
			if err = checkMoved(dst); err == nil {
				return
			}
		}
	} else if errors.Is(err, unix.ENOENT) && checkMoved(dst) == nil {
		// The janitor moved it first.
		return
	} else if err == nil {
		err = fmt.Errorf("it is not a socket (mode %o)", st.Mode)
	}
	os.Remove(in.MonitorPath)
	p.log.Warn("the target QEMU's monitor could not be kept: its post-copy cannot be resumed", zap.String("migration", in.ID),
		zap.String("domain", in.Domain), zap.Error(err))
}

// hideStrayMonitor moves a monitor socket found in the socket dir into
// the monitors' directory; anything else of the name goes.
func hideStrayMonitor(socketDir, path string, log *zap.Logger) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		dst := filepath.Join(socketDir, monitorDirName, filepath.Base(path))
		if os.Rename(path, dst) == nil && checkMoved(dst) == nil {
			log.Info("moved a QEMU monitor socket out of QEMU's reach", zap.String("name", filepath.Base(path)))
			return
		}
	}
	os.Remove(path)
}

// checkMoved makes sure what a rename moved in is a socket, and removes
// it if not (a link swapped in after it was looked at).
func checkMoved(dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		os.Remove(dst)
		return fmt.Errorf("what was moved in is not a socket (mode %o)", st.Mode)
	}
	return nil
}

// dropMonitor removes a migration's monitor once nothing will resume it.
func (p *Proxy) dropMonitor(id string) {
	os.Remove(HiddenMonitorPath(p.cfg.SocketDir, id))
}

// removeStaleMonitors deletes monitors older than monitorKeep.
func removeStaleMonitors(socketDir string, log *zap.Logger) {
	dir := filepath.Join(socketDir, monitorDirName)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), "-qmp.sock") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > monitorKeep {
			if os.Remove(filepath.Join(dir, e.Name())) == nil {
				log.Info("removed a stale QEMU monitor socket", zap.String("name", e.Name()))
			}
		}
	}
}
