package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/internal/atomicfile"
	"github.com/ferry-vm/ferry/peer"
)

// outcomeRecord is a prepared migration as the target keeps it on disk:
// written before the prepare is answered, and again with the finish's
// answer, so a source that lost the answer, or asks a restarted ferryd,
// hears the same truth.
type outcomeRecord struct {
	ID       string    `json:"id"`
	Owner    string    `json:"owner"`
	Domain   string    `json:"domain"`
	Instance string    `json:"instance,omitempty"`
	Prepared time.Time `json:"prepared"`
	// Finishing: libvirt's Finish (not cancelled) began, and may have
	// handed the guest over; without a Result, absence proves nothing.
	Finishing bool                  `json:"finishing,omitempty"`
	Result    *peer.ControlResponse `json:"result,omitempty"`
	// LibvirtResume: a broken post-copy of it is resumed by libvirt's own
	// protocol, its target QEMU having no monitor of Ferry's (recorded at
	// prepare and kept through every later write; absent in the records
	// of a ferryd from before, whose targets all had a monitor).
	LibvirtResume bool `json:"libvirtResume,omitempty"`
}

// maxOutcomeFile bounds what is read back of one record.
const maxOutcomeFile = 1 << 20

// outcomeStore keeps the records in one directory, a file per migration
// named by its id (this node's own 128 random bits, never a peer's text).
type outcomeStore struct {
	dir string
	mu  sync.Mutex
}

func openOutcomes(dir string) (*outcomeStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("migration outcome directory %s: %w", dir, err)
	}
	s := &outcomeStore{dir: dir}
	s.trim()
	return s, nil
}

func (s *outcomeStore) path(id string) (string, error) {
	if err := peer.ValidID(id); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, id+".json"), nil
}

func (s *outcomeStore) save(r outcomeRecord) error {
	p, err := s.path(r.ID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := s.read(p, r.ID)
	if err == nil && old.Result != nil {
		// An answer once given is the answer: a later reading of libvirt
		// (the guest powered off since) must not replace it.
		return nil
	} else if r.Result == nil {
		s.trim()
	}
	r.LibvirtResume = r.LibvirtResume || err == nil && old.LibvirtResume
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(p, b)
}

// all reads every record kept.
func (s *outcomeStore) all() []outcomeRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	entries, _ := os.ReadDir(s.dir)
	var out []outcomeRecord
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || peer.ValidID(id) != nil {
			continue
		}
		if r, err := s.read(filepath.Join(s.dir, e.Name()), id); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// recovered replaces a split answer with a recovered migration's: the
// guest runs whole here now. No other answer is ever replaced.
func (s *outcomeStore) recovered(id string, resp peer.ControlResponse) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := s.read(p, id)
	if err != nil {
		return err
	}
	if old.Result == nil || old.Result.Outcome != peer.OutcomeSplit || resp.Outcome != peer.OutcomeRunning {
		return nil
	}
	old.Result = &resp
	b, err := json.Marshal(old)
	if err != nil {
		return err
	}
	return atomicfile.Write(p, b)
}

// maxOutcomeRecords bounds the directory: past it the oldest records go,
// pruned as each new migration is recorded. Never by age: a clock stepped
// forward (a bad RTC corrected) would drop at once every answer a source
// still has to hear; thousands of migrations later, none is waiting.
const maxOutcomeRecords = 4096

// trimBatch is how many records a trim makes room for: reading a full
// store's records is paid once per batch of saves, not at each.
const trimBatch = 256

// trim drops the oldest records beyond maxOutcomeRecords, those of a split
// or a finish under way (a guest a recovery may still resume) last; held
// with s.mu.
func (s *outcomeStore) trim() {
	entries, _ := os.ReadDir(s.dir)
	if len(entries) < maxOutcomeRecords {
		// Only a full directory is read record by record.
		return
	}
	type rec struct {
		name string
		at   time.Time
		held bool
	}
	var recs []rec
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || peer.ValidID(id) != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		r, err := s.read(filepath.Join(s.dir, e.Name()), id)
		held := err == nil && (r.Finishing && r.Result == nil || r.Result != nil && r.Result.Outcome == peer.OutcomeSplit)
		recs = append(recs, rec{e.Name(), fi.ModTime(), held})
	}
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].held != recs[j].held {
			return !recs[i].held
		}
		return recs[i].at.Before(recs[j].at)
	})
	// Down by a batch: the next saves list the directory only.
	for over := len(recs) - (maxOutcomeRecords - trimBatch); over > 0; over-- {
		os.Remove(filepath.Join(s.dir, recs[0].name))
		recs = recs[1:]
	}
}

// load returns the record of id; ok is false if there is none, and err
// says why one that exists could not be read.
func (s *outcomeStore) load(id string) (r outcomeRecord, ok bool, err error) {
	p, err := s.path(id)
	if err != nil {
		return r, false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err = s.read(p, id)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("migration outcome record %s: %w", p, err)
	}
	return r, true, nil
}

func (s *outcomeStore) read(p, id string) (outcomeRecord, error) {
	var r outcomeRecord
	b, err := atomicfile.ReadBounded(p, maxOutcomeFile)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err == nil && r.ID != id {
		err = fmt.Errorf("names migration %q", r.ID)
	}
	return r, err
}
