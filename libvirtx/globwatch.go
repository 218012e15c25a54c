package libvirtx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// globWatch tells the pool at once when a path matching its glob may have
// appeared or gone, so a new virt-launcher's libvirt is watched within
// milliseconds rather than at the next periodic scan (which stays, as the
// fallback for whatever inotify misses: an overflowed queue, a directory
// created and filled between two refreshes).
//
// It watches every directory the glob's parent pattern matches and, since
// those come and go with pods, the directories on the way there from the
// last fixed directory: a new pod directory is an event that makes the pool
// rescan and refresh, so the watch reaches the new libvirt-runtime directory
// before virtqemud creates its socket there.
type globWatch struct {
	levels []string // glob patterns of the directories to watch, shallowest first
	kick   chan<- struct{}
	log    *zap.Logger

	mu      sync.Mutex
	fd      int
	f       *os.File // fd, read through Go's poller so Close ends the reader
	watched map[string]int32
	paths   map[int32]string
}

const globWatchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// newGlobWatch starts watching for glob's matches; kick gets a token
// (never blocking) whenever one may have changed. It fails only when
// inotify itself is unavailable, and the pool then scans periodically alone.
func newGlobWatch(glob string, kick chan<- struct{}, log *zap.Logger) (*globWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	w := &globWatch{levels: watchLevels(glob), kick: kick, log: log, fd: fd,
		f: os.NewFile(uintptr(fd), "inotify"), watched: map[string]int32{}, paths: map[int32]string{}}
	go w.read(w.f)
	return w, nil
}

// watchLevels lists the directory patterns to watch for glob: its parent
// pattern and each ancestor pattern up to the deepest one without a
// wildcard. A glob without wildcards in its directory part gives its
// parent alone.
func watchLevels(glob string) []string {
	parent := filepath.Dir(filepath.Clean(glob))
	var levels []string
	for p := parent; ; p = filepath.Dir(p) {
		levels = append([]string{p}, levels...)
		if !hasMeta(p) || p == filepath.Dir(p) {
			break
		}
	}
	return levels
}

func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// refresh adds a watch on every directory the levels match now; the kernel
// drops the watches of directories that go away.
func (w *globWatch) refresh() {
	var dirs []string
	for _, l := range w.levels {
		m, _ := glob(l)
		dirs = append(dirs, m...)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return
	}
	for _, d := range dirs {
		if _, ok := w.watched[d]; ok {
			continue
		}
		wd, err := unix.InotifyAddWatch(w.fd, d, globWatchMask)
		if err != nil {
			// Gone since the glob, or not a directory: nothing to watch.
			if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
				w.log.Debug("cannot watch a libvirt socket directory", zap.String("dir", d), zap.Error(err))
			}
			continue
		}
		w.watched[d], w.paths[int32(wd)] = int32(wd), d
	}
}

// Watching reports how many directories are watched.
func (w *globWatch) watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watched)
}

// read gets the file rather than reading w.f, which close clears under the
// lock while this goroutine is blocked in Read.
func (w *globWatch) read(f *os.File) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			return // closed
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&unix.IN_IGNORED != 0 {
				if d, ok := w.paths[ev.Wd]; ok {
					delete(w.watched, d)
					delete(w.paths, ev.Wd)
				}
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		w.mu.Unlock()
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

func (w *globWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}
