package migration

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
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
	Role     api.Role  `json:"role"`
	Detected time.Time `json:"detected"`
}

type ledgerKey struct {
	socket, uuid string
	role         api.Role
}

func (r ledgerRecord) key() ledgerKey { return ledgerKey{r.Socket, r.UUID, r.Role} }

// ledger is used under the tracker's lock; the file is written outside it
// (see snapshot and write).
type ledger struct {
	path string
	log  *zap.Logger
	// recs are the records kept in the file: the previous ferryd's and
	// this one's, within the bounds.
	recs []ledgerRecord
	// shown are the failures this process has a job for, so they are
	// neither opened nor reported again however long the domain stays
	// failed. Unbounded by design: it never depends on the file having room,
	// and it holds no more than the failed domains libvirt lists.
	shown map[ledgerKey]string // -> domain name
	// seq is bumped on every change of recs; snapped is the seq of the
	// last snapshot taken.
	seq, snapped uint64

	wmu     sync.Mutex
	written uint64
}

// openLedger loads the ledger of dir; with no dir it keeps records in
// memory only. A file that cannot be read is set aside, not trusted: the
// worst outcome is one failure reported twice.
func openLedger(dir string, log *zap.Logger) *ledger {
	l := &ledger{log: log, shown: map[ledgerKey]string{}}
	if dir == "" {
		return l
	}
	l.path = filepath.Join(dir, ledgerFile)
	b, err := atomicfile.ReadBounded(l.path, maxLedgerBytes)
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

// recorded returns the record a previous ferryd left of this failure.
func (l *ledger) recorded(k ledgerKey) (ledgerRecord, bool) {
	for _, r := range l.recs {
		if r.key() == k {
			return r, true
		}
	}
	return ledgerRecord{}, false
}

// holds says whether any failure of socket is recorded.
func (l *ledger) holds(socket string) bool {
	for k := range l.shown {
		if k.socket == socket {
			return true
		}
	}
	for _, r := range l.recs {
		if r.Socket == socket {
			return true
		}
	}
	return false
}

// known reports a failure recorded by this process or a previous one.
func (l *ledger) known(k ledgerKey) bool {
	_, ok := l.recorded(k)
	_, shown := l.shown[k]
	return ok || shown
}

// add notes a failure this process has a job for, and keeps it in the
// file when there is room: a socket past its share, or a full file, loses
// only the restart guarantee for it, never this process's.
func (l *ledger) add(r ledgerRecord) {
	k := r.key()
	l.shown[k] = r.Domain
	if _, ok := l.recorded(k); ok {
		return
	}
	n := 0
	for _, x := range l.recs {
		if x.Socket == r.Socket {
			n++
		}
	}
	if n >= maxLedgerPerSocket || len(l.recs) >= maxLedger {
		l.log.Warn("post-copy failure ledger has no room for this failure; a restart may report it again",
			zap.String("domain", r.Domain), zap.String("socket", r.Socket))
		return
	}
	l.recs = append(l.recs, r)
	l.seq++
}

// prune forgets the failures of socket that keep() rejects: their domains
// left the post-copy-failed state, so a new failure must count again.
func (l *ledger) prune(socket string, keep func(ledgerRecord) bool) {
	for k, domain := range l.shown {
		if k.socket == socket && !keep(ledgerRecord{Socket: k.socket, UUID: k.uuid, Role: k.role, Domain: domain}) {
			delete(l.shown, k)
		}
	}
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
	l.seq++
}

// ledgerSnapshot is the file's next content, taken under the tracker's lock.
type ledgerSnapshot struct {
	seq  uint64
	data []byte
}

// snapshot returns the content to write if the records changed since the
// last snapshot; nil otherwise.
func (l *ledger) snapshot() *ledgerSnapshot {
	if l.path == "" || l.seq == l.snapped {
		return nil
	}
	l.snapped = l.seq
	b, err := json.Marshal(l.recs)
	if err != nil {
		return nil
	}
	return &ledgerSnapshot{seq: l.seq, data: b}
}

// write stores a snapshot, outside the tracker's lock: a synced write must
// not stall every other socket and every scrape. An older snapshot never
// replaces a newer one.
func (l *ledger) write(s *ledgerSnapshot) {
	if s == nil {
		return
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if s.seq <= l.written {
		return
	}
	err := os.MkdirAll(filepath.Dir(l.path), 0o700)
	if err == nil {
		err = atomicfile.Write(l.path, s.data)
	}
	if err != nil {
		l.log.Warn("cannot write the post-copy failure ledger; a restart may report failures again", zap.String("path", l.path), zap.Error(err))
		return
	}
	l.written = s.seq
}
