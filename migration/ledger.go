package migration

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// ledgerFile holds the post-copy failures this node recorded whose domains
// still sit in a post-copy-failed state. A guest stays that way until an
// operator acts, so without it every restart of ferryd would find, count
// and report the same failure again.
const ledgerFile = "postcopy-failed.json"

// maxLedger bounds the file: far more domains than a node runs.
const maxLedger = 4096

type ledgerRecord struct {
	Socket   string    `json:"socket"`
	Domain   string    `json:"domain"`
	UUID     string    `json:"uuid"`
	Role     Role      `json:"role"`
	Detected time.Time `json:"detected"`
}

// ledger is used under the tracker's lock. Writes are rare (one per
// post-copy failure, one per recovery) and small.
type ledger struct {
	path string
	log  *zap.Logger
	recs []ledgerRecord
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
	b, err := os.ReadFile(l.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		log.Warn("post-copy failure ledger unreadable; failures still in place will be reported again", zap.String("path", l.path), zap.Error(err))
	default:
		if err := json.Unmarshal(b, &l.recs); err != nil {
			log.Warn("post-copy failure ledger corrupt; set aside, failures still in place will be reported again",
				zap.String("path", l.path), zap.Error(err))
			l.recs = nil
			_ = os.Rename(l.path, l.path+".corrupt")
		}
	}
	return l
}

func (l *ledger) get(uuid string, role Role) (ledgerRecord, bool) {
	for _, r := range l.recs {
		if r.UUID == uuid && r.Role == role {
			return r, true
		}
	}
	return ledgerRecord{}, false
}

func (l *ledger) add(r ledgerRecord) {
	if _, ok := l.get(r.UUID, r.Role); ok {
		return
	}
	l.recs = append(l.recs, r)
	if len(l.recs) > maxLedger {
		l.recs = l.recs[len(l.recs)-maxLedger:]
	}
	l.save()
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
	l.save()
}

// save replaces the file atomically, so a crash leaves the old or the new.
func (l *ledger) save() {
	if l.path == "" {
		return
	}
	b, err := json.Marshal(l.recs)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(l.path), 0o700)
	}
	if err == nil {
		tmp := l.path + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, l.path)
		}
	}
	if err != nil {
		l.log.Warn("cannot write the post-copy failure ledger; a restart may report failures again", zap.String("path", l.path), zap.Error(err))
	}
}
