package proxy

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
)

// removeStaleSockets deletes migration sockets a previous ferryd left in
// the socket dir (a restart forgets its registrations, so nothing else
// would). A socket something still listens on, such as a target QEMU's
// during an incoming migration, is kept: it is looked up in the kernel's
// list, never connected to, since a connection would become QEMU's stream.
//
// Only sockets older than minAge go: QEMU binds its socket an instant before
// it listens on it.
func removeStaleSockets(dir string, minAge time.Duration, log *zap.Logger) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	listening := listeningUnixSockets()
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		if qemuListens(e.Name()) {
			// What a QEMU listens on never stays in every QEMU's reach
			// (a guest restored from a live XML that names its monitor
			// makes it again).
			hideQEMUSocket(dir, path, log)
			continue
		}
		if !strings.HasSuffix(e.Name(), "-source.sock") {
			continue
		}
		if listening[path] {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < minAge {
			continue
		}
		if err := os.Remove(path); err == nil {
			log.Info("removed a stale migration socket", zap.String("path", path))
		}
	}
}

// listeningUnixSockets reads /proc/net/unix for bound, listening sockets.
func listeningUnixSockets() map[string]bool {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 is
		// __SO_ACCEPTCON. The path is the rest of the line: it may hold
		// spaces.
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 8 || fields[3] != "00010000" {
			continue
		}
		if path, ok := afterFields(line, 7); ok {
			out[path] = true
		}
	}
	return out
}

// afterFields is what follows the first n space-separated fields of line,
// less the one space before it.
func afterFields(line string, n int) (string, bool) {
	i := 0
	for k := 0; k < n; k++ {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		for i < len(line) && line[i] != ' ' {
			i++
		}
	}
	if i >= len(line)-1 {
		return "", false
	}
	return line[i+1:], true
}
