package migration

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/internal/atomicfile"
)

// ledgerFile holds the post-copy failures this node recorded whose domains
// still sit in a post-copy-failed state. A guest stays that way until an
// operator acts, so without it every restart of ferryd would find, count
// and report the same failure again.
const ledgerFile = "postcopy-failed.json"

// Bounds on what one libvirt socket (a launcher pod, which need not be
// honest) can make the ledger hold, and on the whole file.
const (
	maxLedgerPerSocket = 256
	maxLedger          = 4096
	maxLedgerBytes     = 4 << 20
)

type ledgerRecord struct {
	Socket   string    `json:"socket"`
	Domain   string    `json:"domain"`
	UUID     string    `json:"uuid"`
	Role     Role      `json:"role"`
	Detected time.Time `json:"detected"`
	// shown: this process has a job for it, so it is neither opened nor
	// reported again however long the domain stays failed.
	shown bool
}

// ledger is used under the tracker's lock; changes are written once per
// input (flush), not once per record.
type ledger struct {
	path  string
	log   *zap.Logger
	recs  []ledgerRecord
	dirty bool
}

// openLedger loads the ledger of dir; with no dir it keeps records in
// memory only. A file that cannot be read is set aside, not trusted: the
// worst outcome is one failure reported twice.
func openLedger(dir string, log *zap.Logger) *ledger {
	l := &ledger{log: log}
	if dir == "" {
		return l
	}
	l.path = filepath.Join(dir, ledgerFile)
	b, err := readBounded(l.path, maxLedgerBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		log.Warn("post-copy failure ledger unreadable; failures still in place will be reported again", zap.String("path", l.path), zap.Error(err))
	default:
		if err := json.Unmarshal(b, &l.recs); err != nil || len(l.recs) > maxLedger {
			log.Warn("post-copy failure ledger corrupt; set aside, failures still in place will be reported again",
				zap.String("path", l.path), zap.Error(err), zap.Int("records", len(l.recs)))
			l.recs = nil
			_ = os.Rename(l.path, l.path+".corrupt")
		}
	}
	return l
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = errors.New("larger than expected")
	}
	return b, err
}

func (l *ledger) get(socket, uuid string, role Role) *ledgerRecord {
	for i := range l.recs {
		if r := &l.recs[i]; r.Socket == socket && r.UUID == uuid && r.Role == role {
			return r
		}
	}
	return nil
}

func (l *ledger) add(r ledgerRecord) {
	if l.get(r.Socket, r.UUID, r.Role) != nil {
		return
	}
	n, oldest := 0, -1
	for i, x := range l.recs {
		if x.Socket == r.Socket {
			n++
			if oldest < 0 {
				oldest = i
			}
		}
	}
	if n >= maxLedgerPerSocket {
		l.recs = append(l.recs[:oldest], l.recs[oldest+1:]...)
	}
	if len(l.recs) >= maxLedger {
		l.log.Warn("post-copy failure ledger full; this failure may be reported again after a restart",
			zap.String("domain", r.Domain), zap.String("socket", r.Socket))
		return
	}
	r.shown = true
	l.recs = append(l.recs, r)
	l.dirty = true
}

// prune drops the records of socket that keep() rejects: their domains
// left the post-copy-failed state, so a new failure must count again.
func (l *ledger) prune(socket string, keep func(ledgerRecord) bool) {
	out := l.recs[:0]
	for _, r := range l.recs {
		if r.Socket != socket || keep(r) {
			out = append(out, r)
		}
	}
	if len(out) == len(l.recs) {
		return
	}
	clear(l.recs[len(out):])
	l.recs = out
	l.dirty = true
}

// flush writes the ledger if it changed.
func (l *ledger) flush() {
	if !l.dirty || l.path == "" {
		l.dirty = false
		return
	}
	l.dirty = false
	if err := l.write(); err != nil {
		l.log.Warn("cannot write the post-copy failure ledger; a restart may report failures again", zap.String("path", l.path), zap.Error(err))
	}
}

func (l *ledger) write() error {
	b, err := json.Marshal(l.recs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(l.path, b)
}
