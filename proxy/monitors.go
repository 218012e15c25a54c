package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/ferry-vm/ferry/peer"
)

// A post-copy target QEMU creates Ferry's QMP monitor socket in the socket
// dir, which QEMU's group may write: any QEMU of the node could reach it
// there, and its name shows in QEMU's command line. Once Prepare has
// returned, the proxy moves it into a directory only ferryd's user may
// enter. QEMU keeps listening: a renamed socket is the same socket.

// monitorDirName is that directory, inside the socket dir (one filesystem,
// so a rename moves the socket).
const monitorDirName = ".monitors"

// HiddenMonitorPath is where a migration's monitor is kept once moved.
func HiddenMonitorPath(dir, id string) string {
	return filepath.Join(dir, monitorDirName, id+"-qmp.sock")
}

// maxSocketPath is what a unix socket's path may hold (sun_path).
const maxSocketPath = 107

// monitorPathFits says whether the paths ferryd connects to in the hidden
// directory fit a socket address: a target QEMU's socket and a monitor.
func monitorPathFits(socketDir string) error {
	id := newMigrationID()
	for what, p := range map[string]string{
		"a target QEMU's migration socket":             HiddenPath(socketDir, TargetSocketPath(socketDir, id, peer.KindDisk)) + "." + strconv.FormatUint(math.MaxUint64, 16),
		"a QEMU monitor (post-copy recovery needs it)": HiddenMonitorPath(socketDir, id),
	} {
		if n := len(p); n > maxSocketPath {
			return fmt.Errorf("--proxy-socket-dir %s is too long: the path of %s, hidden in it, is %d bytes, over the %d a unix socket takes", socketDir, what, n, maxSocketPath)
		}
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
func (p *Proxy) hideMonitor(in peer.IncomingMigration) {
	if in.MonitorPath == "" || in.LibvirtResume {
		return
	}
	var st unix.Stat_t
	dst := HiddenMonitorPath(p.cfg.SocketDir, in.ID)
	err := unix.Lstat(in.MonitorPath, &st)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		if err = unix.Renameat2(unix.AT_FDCWD, in.MonitorPath, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err == nil {
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

// hideQEMUSocket moves a socket a QEMU listens on in the socket dir (a
// target's migration socket, a monitor) into the hidden directory;
// anything else of the name goes. A target socket is hidden under its
// name and its inode, so that one a sibling QEMU bound first under the
// same name (it read the migration's id off a command line) never stands
// in the way of the guest's own: the proxy dials each of the name and
// keeps the one the guest's QEMU listens on.
func hideQEMUSocket(socketDir, path string, log *zap.Logger) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		dst := filepath.Join(socketDir, monitorDirName, filepath.Base(path))
		if strings.HasSuffix(path, targetSuffix) {
			dst += "." + strconv.FormatUint(st.Ino, 16)
		}
		// Never over a hidden monitor of the name: a QEMU that read the
		// name off another's command line would take its place.
		if unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE) == nil && checkMoved(dst) == nil {
			log.Info("moved a QEMU socket out of other QEMUs' reach", zap.String("name", filepath.Base(dst)))
			return
		}
	}
	os.Remove(path)
}

// targetSuffix ends a target QEMU's migration socket's name.
const targetSuffix = "-target.sock"

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

// removeStaleMonitors deletes the monitors no QEMU listens on any more:
// nothing can resume a migration through them. The kernel names a socket
// by the path it was bound to, which a move does not change: a hidden
// monitor was bound in the socket dir under its own name.
func removeStaleMonitors(socketDir string, minAge time.Duration, log *zap.Logger) {
	dir := filepath.Join(socketDir, monitorDirName)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	listening := listeningUnixSockets()
	if listening == nil {
		// Unknown: a monitor removed is a recovery lost for good.
		return
	}
	for _, e := range ents {
		if !qemuListens(e.Name()) || listening[boundPath(socketDir, e.Name())] {
			continue
		}
		// QEMU binds an instant before it listens.
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < minAge {
			continue
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			log.Info("removed a hidden QEMU socket no QEMU listens on", zap.String("name", e.Name()))
		}
	}
}

// HiddenPath is where a socket a QEMU listens on in the socket dir is
// kept once moved out of every QEMU's reach: a monitor under its name, a
// target socket under its name and inode (see hideQEMUSocket).
func HiddenPath(socketDir, path string) string {
	return filepath.Join(socketDir, monitorDirName, filepath.Base(path))
}

// hiddenTargets are the hidden sockets of target's name, whichever QEMU
// bound them.
func hiddenTargets(socketDir, target string) []string {
	prefix := HiddenPath(socketDir, target)
	found, _ := filepath.Glob(prefix + ".[0-9a-f]*")
	if _, err := os.Lstat(prefix); err == nil {
		// Hidden by a ferryd from before names carried the inode.
		found = append(found, prefix)
	}
	// Newest first: a sibling that bound the name ahead of the guest's
	// QEMU, however often, comes after it.
	made := map[string]time.Time{}
	for _, f := range found {
		if fi, err := os.Lstat(f); err == nil {
			made[f] = fi.ModTime()
		}
	}
	slices.SortStableFunc(found, func(a, b string) int { return made[b].Compare(made[a]) })
	if len(found) > maxHiddenOfAName {
		found = found[:maxHiddenOfAName]
	}
	return found
}

// maxHiddenOfAName bounds the sockets of one name the proxy dials.
const maxHiddenOfAName = 64

// boundPath is the path a hidden socket was bound at, in the socket dir.
func boundPath(socketDir, hiddenName string) string {
	name := hiddenName
	if i := strings.LastIndex(name, targetSuffix+"."); i >= 0 {
		name = name[:i+len(targetSuffix)]
	}
	return filepath.Join(socketDir, name)
}

// hideTargets moves migration in's target sockets, which its QEMU listens
// on since its Prepare, out of QEMU's reach, if the watch has not yet.
func (p *Proxy) hideTargets(in peer.IncomingMigration) {
	for _, uri := range []string{in.MemoryURI, in.DiskURI} {
		path, ok := strings.CutPrefix(uri, "unix://")
		if !ok || path == "" {
			continue
		}
		if _, err := os.Lstat(path); err == nil {
			hideQEMUSocket(p.cfg.SocketDir, path, p.log)
		}
	}
}

// reachable are where the proxy dials migration e's target socket: where
// it was hidden, each socket of its name. One not hidden yet (the watch
// missed it) is hidden first. Only a migration registered by hand, whose
// socket is no QEMU's this node started, is dialled where it is.
func (p *Proxy) reachable(e *entry, target string) []string {
	byHand := e.in == nil && e.m.RecoveryOf == ""
	if !byHand {
		if _, err := os.Lstat(target); err == nil {
			hideQEMUSocket(p.cfg.SocketDir, target, p.log)
		}
	}
	if hidden := hiddenTargets(p.cfg.SocketDir, target); len(hidden) > 0 || !byHand {
		return hidden
	}
	return []string{target}
}

// monitorGreeting bounds how long QEMU takes to greet a monitor client.
const monitorGreeting = 2 * time.Second

// monitorIsOurs checks, once its Prepare has returned and the monitor is
// hidden, that migration in's monitor is the guest's QEMU's and free. QEMU
// serves one monitor client at a time and greets it at once: another QEMU
// of the node that reached the monitor before it was hidden, and holds it,
// leaves ferryd ungreeted, and would hold the guest's recovery hostage.
// Such a migration is not taken.
func (p *Proxy) monitorIsOurs(in peer.IncomingMigration) error {
	if in.MonitorPath == "" || in.LibvirtResume {
		return nil
	}
	c, err := net.DialTimeout("unix", HiddenMonitorPath(p.cfg.SocketDir, in.ID), p.cfg.DialTimeout)
	if err != nil {
		return fmt.Errorf("the target QEMU's recovery monitor could not be kept: %w", err)
	}
	defer c.Close()
	if err := p.checkQEMUOf(c, in.Domain, "the target QEMU's recovery monitor"); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(monitorGreeting))
	line, err := bufio.NewReader(io.LimitReader(c, 64<<10)).ReadString('\n')
	if err != nil || !strings.Contains(line, `"QMP"`) {
		return errors.New("the target QEMU does not greet ferryd on its recovery monitor: another process reached it before it was hidden, and holds it")
	}
	return nil
}

// dialTargetQEMU connects to the socket migration e's target QEMU listens
// on for the stream h names: of the sockets hidden under its name, the
// one whose listener is that QEMU (another QEMU's, bound first under the
// name, is connected to and let go: it learns nothing). reason is the
// refusal's code when none is.
func (p *Proxy) dialTargetQEMU(e *entry, target string, h peer.Header) (net.Conn, string, error) {
	what := fmt.Sprintf("the %s socket of migration %s", h.Kind, h.ID)
	reason, last := "dial_failed", fmt.Errorf("cannot reach %s: no QEMU listens on it", what)
	// Twice: the watch may move a socket between its listing and its dial.
	for range 2 {
		c, r, err := p.dialCandidates(e, target, what)
		if err == nil {
			return c, "", nil
		}
		if reason, last = r, err; !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	return nil, reason, last
}

// dialCandidates connects to the first of target's sockets whose listener
// is migration e's QEMU.
func (p *Proxy) dialCandidates(e *entry, target, what string) (net.Conn, string, error) {
	candidates := p.reachable(e, target)
	if len(candidates) == 0 {
		return nil, "dial_failed", fmt.Errorf("cannot reach %s: %w", what, unix.ENOENT)
	}
	reason, last := "dial_failed", error(nil)
	for _, path := range candidates {
		local, err := net.DialTimeout("unix", path, p.cfg.DialTimeout)
		if err != nil {
			last = fmt.Errorf("cannot reach %s: %w", what, err)
			continue
		}
		if err := p.checkTargetQEMU(local, e, what); err != nil {
			local.Close()
			reason, last = "local_peer_not_qemu", err
			continue
		}
		return local, "", nil
	}
	return nil, reason, last
}
