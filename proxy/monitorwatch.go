package proxy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// What a QEMU listens on in the socket dir is in every QEMU's reach there,
// all QEMUs being one user without sVirt: a target QEMU's migration
// socket, which would take another QEMU's connection as the guest's
// stream, and Ferry's monitor. Each is moved into the hidden directory,
// which only ferryd enters, the moment it appears (and once more when its
// Prepare returns); ferryd dials it there. A guest's live XML keeps the
// recovery monitor's arguments for as long as its QEMU runs, and libvirt starts a QEMU from that XML again on a
// restore (a managed save, libvirt-guests at shutdown) or a create from a
// dump: that QEMU makes the monitor in the socket dir again, within any
// QEMU's reach. watchMonitors moves each one out of reach the moment it
// appears; the janitor's sweep stays for what inotify misses.

// watchMonitors hides every monitor socket created in the socket dir as it
// is created, until ctx ends. Without inotify the janitor's sweep alone
// does.
func (p *Proxy) watchMonitors(ctx context.Context) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		p.log.Warn("cannot watch the socket dir for QEMU monitors; they are moved out of QEMU's reach every 30 s only", zap.Error(err))
		return
	}
	f := os.NewFile(uintptr(fd), "inotify")
	context.AfterFunc(ctx, func() { f.Close() })
	if _, err := unix.InotifyAddWatch(fd, p.cfg.SocketDir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err != nil {
		f.Close()
		p.log.Warn("cannot watch the socket dir for QEMU monitors; they are moved out of QEMU's reach every 30 s only", zap.Error(err))
		return
	}
	// One made before the watch began.
	if ents, err := os.ReadDir(p.cfg.SocketDir); err == nil {
		for _, e := range ents {
			if qemuListens(e.Name()) {
				hideQEMUSocket(p.cfg.SocketDir, filepath.Join(p.cfg.SocketDir, e.Name()), p.log)
			}
		}
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		for _, name := range createdNames(buf[:n]) {
			if qemuListens(name) {
				hideQEMUSocket(p.cfg.SocketDir, filepath.Join(p.cfg.SocketDir, name), p.log)
			}
		}
	}
}

// createdNames reads the names out of a buffer of inotify events.
func createdNames(b []byte) []string {
	var out []string
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			break
		}
		if ev.Len > 0 {
			name := b[unix.SizeofInotifyEvent:end]
			if i := strings.IndexByte(string(name), 0); i >= 0 {
				name = name[:i]
			}
			out = append(out, string(name))
		}
		b = b[end:]
	}
	return out
}

// qemuListens says whether a socket dir entry is one a QEMU listens on:
// a target's migration socket or Ferry's monitor.
func qemuListens(name string) bool {
	if i := strings.LastIndex(name, targetSuffix+"."); i >= 0 {
		name = name[:i+len(targetSuffix)] // hidden under its inode too
	}
	return strings.HasSuffix(name, "-qmp.sock") || strings.HasSuffix(name, targetSuffix)
}
