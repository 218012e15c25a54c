package drive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/atomicfile"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// drivenRecord is a migration this node drives, kept on disk from before
// its Perform until it has ended, so that a ferryd restarted meanwhile
// settles it with the target and records it, rather than forget it with
// the guest perhaps left paused.
type drivenRecord struct {
	ID          string    `json:"id"`
	TargetID    string    `json:"targetId"`
	Domain      string    `json:"domain"`
	UUID        string    `json:"uuid"`
	Socket      string    `json:"socket"`
	Target      string    `json:"target"`
	TargetOwner string    `json:"targetOwner,omitempty"`
	TargetNode  string    `json:"targetNode,omitempty"`
	Flags       uint32    `json:"flags"`
	Started     time.Time `json:"started"`
	// MaxSpeedMiBs is the domain's migration speed before this one,
	// which a failed migration gives back.
	MaxSpeedMiBs uint64 `json:"maxSpeedMiBs,omitempty"`
	// Autostart says the guest's autostart was on, and is off for the
	// migration: a guest that stays here gets it back.
	Autostart bool `json:"autostart,omitempty"`
	// GivenUp: an operator gave up the recovery of its broken post-copy;
	// kept while the guest is held here, for ferryctl recover.
	GivenUp bool `json:"givenUp,omitempty"`
	// StalePaused: this node's copy ran again after the switch to
	// post-copy and was paused (see staleCopyGuard), with the target's
	// word still to settle it.
	StalePaused bool `json:"stalePaused,omitempty"`
}

// drivenDir holds the records, one file per migration id.
const drivenDir = "driven-migrations"

var drivenID = regexp.MustCompile(`^m-[0-9a-f]{16}$`)

func (s *Source) drivenPath(id string) (string, bool) {
	if s.cfg.StateDir == "" || !drivenID.MatchString(id) {
		return "", false
	}
	return filepath.Join(s.cfg.StateDir, drivenDir, id+".json"), true
}

// recordDrive keeps r on disk; without a state directory nothing outlives
// this process.
func (s *Source) recordDrive(r drivenRecord) error {
	p, ok := s.drivenPath(r.ID)
	if !ok {
		return nil
	}
	b, err := json.Marshal(r)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(p), 0o700)
	}
	if err == nil {
		err = atomicfile.Write(p, b)
	}
	return err
}

func (s *Source) forgetDrive(id string) {
	if p, ok := s.drivenPath(id); ok {
		os.Remove(p)
	}
}

// recordedDrives are the records a previous ferryd left.
func (s *Source) recordedDrives() []drivenRecord {
	if s.cfg.StateDir == "" {
		return nil
	}
	dir := filepath.Join(s.cfg.StateDir, drivenDir)
	entries, _ := os.ReadDir(dir)
	var out []drivenRecord
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !drivenID.MatchString(id) {
			continue
		}
		var r drivenRecord
		b, err := atomicfile.ReadBounded(filepath.Join(dir, e.Name()), 64<<10)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil || r.ID != id || r.Domain == "" || r.Socket == "" {
			s.log.Warn("unreadable record of a driven migration, set aside", zap.String("file", e.Name()), zap.Error(err))
			os.Rename(filepath.Join(dir, e.Name()), filepath.Join(dir, e.Name()+".corrupt"))
			continue
		}
		out = append(out, r)
	}
	return out
}

// SettleRecorded settles the migrations a previous ferryd was driving
// when it stopped: each goes on in the background until settled or ctx
// ends, as does the sweep of given-up records.
func (s *Source) SettleRecorded(ctx context.Context) {
	if s.proxy == nil {
		return
	}
	go s.sweepGivenUp(ctx)
	for _, r := range s.recordedDrives() {
		// No new migration of the domain starts until it is settled.
		key := driveKey(r.Socket, r.Domain)
		if !s.running.start(key) {
			continue
		}
		if r.GivenUp {
			go func() {
				defer s.running.end(key)
				s.keepGivenUp(ctx, r)
			}()
			continue
		}
		if s.recovers(r) {
			// Before the tracker first looks: a broken post-copy of it is
			// paused for recovery, not failed.
			s.books.Drive(r.Socket, r.Domain, r.info(s.proxy.TLS()))
			s.books.DriveRecoverable(r.Socket, r.Domain, s.cfg.PostCopyRecoveryTimeout)
		}
		go func() {
			defer s.running.end(key)
			s.settleAfterRestart(ctx, r, "ferryd restarted during the migration")
		}()
	}
}

// settleAfterRestart ends a migration from its record: one this node was
// driving when its ferryd stopped, or whose drive ended unsettled (why
// says which). Its Perform cookie is gone, so the migration cannot be
// completed: the target is told to drop its copy,
// unless it already runs the guest, and this node's copy follows the
// target's word. Only then is the record removed.
func (s *Source) settleAfterRestart(ctx context.Context, r drivenRecord, why string) {
	log := s.log.With(zap.String("domain", r.Domain), zap.String("migration", r.ID), zap.String("target", r.Target))
	// SettleRecorded marked it driven for a recovery; settled any other
	// way, the mark goes, or a later migration of the name would inherit it.
	defer s.books.Undrive(r.Socket, r.Domain)
	// However old the record: the target keeps its answer until thousands
	// of migrations later, and one it no longer knows leaves the guest to
	// an operator (ferryctl resolve), never to a clock.
	log.Warn("settling a migration from its record", zap.String("why", why))
	c := s.waitConn(ctx, r.Socket)
	if c == nil {
		return
	}
	// A copy here in post-copy means the guest runs on the target: it is
	// never cancelled there, and what is left is post-copy's to recover.
	if dom, err := c.LookupDomain(ctx, r.Domain); err == nil && libvirtx.UUIDString(dom.UUID) == r.UUID {
		if state, reason, err := c.DomainState(ctx, dom); err == nil && libvirtx.InPostCopy(state, reason) {
			info := r.info(s.proxy.TLS())
			if s.recovers(r) {
				// The streams went with the ferryd that stopped: QEMU holds
				// the migration paused on both nodes, to be resumed.
				s.recoverAfterRestart(log, r, c, dom, info, "ferryd restarted during post-copy")
				return
			}
			s.books.DriveSettled(r.Socket, r.Domain, r.UUID, r.Started, info, api.PhasePostCopyFailed,
				"ferryd restarted during post-copy: the guest's memory is split between the two nodes")
			s.forgetDrive(r.ID)
			log.Error("ferryd restarted during post-copy; the guest's memory is split between the two nodes")
			return
		}
	}
	if s.recovers(r) && s.recoveredThere(ctx, log, r, c) {
		return
	}
	var outcome string
	var last error
	persisted, keptByOperator := false, false
	for attempt := 1; outcome == ""; attempt++ {
		resp, err := s.proxy.ControlTo(ctx, r.Target, r.TargetOwner, peer.ControlRequest{Op: peer.OpFinish,
			Migration: r.TargetID, Domain: r.Domain, Cancelled: true})
		if outcome = settledOutcome(resp, err); outcome != "" {
			persisted = resp.Persisted
			break
		}
		last = err
		if attempt == 1 || attempt%12 == 0 {
			log.Warn("the target has not said whether the guest runs there; asking again (or: ferryctl resolve)", zap.Int("attempt", attempt), zap.Error(err))
		}
		s.running.doubt(driveKey(r.Socket, r.Domain))
		select {
		case <-ctx.Done():
			return
		case outcome = <-s.running.decisions(driveKey(r.Socket, r.Domain)):
			log.Warn("the migration was settled by an operator", zap.String("outcome", outcome))
			keptByOperator = outcome == peer.OutcomeStopped
		case <-time.After(5 * time.Second):
		}
	}
	what, outcome, ok := s.applyUntilDone(ctx, log, r, outcome)
	if !ok {
		return
	}
	if keptByOperator {
		go s.tellTargetKept(log, r)
	}
	info := api.ProxyInfo{MigrationID: r.ID, Target: r.Target, TargetNode: r.TargetNode, TLS: s.proxy.TLS()}
	phase, reason := api.PhaseFailed, why+"; the target dropped its copy: "+what
	switch outcome {
	case peer.OutcomeRunning:
		phase, reason = api.PhaseCompleted, ""
	case peer.OutcomeSplit:
		phase, reason = api.PhasePostCopyFailed, why+", and its post-copy failed: the guest's memory is split between the two nodes"
	}
	s.books.DriveSettled(r.Socket, r.Domain, r.UUID, r.Started, info, phase, reason)
	log.Warn("migration settled after a restart", zap.String("outcome", outcome), zap.String("here", what), zap.NamedError("lastError", last))
	s.forgetSettled(log, r, outcome == peer.OutcomeRunning && persisted)
}

// forgetSettled settles a settled migration's definition here, and forgets
// its record once that is done too.
func (s *Source) forgetSettled(log *zap.Logger, r drivenRecord, targetPersisted bool) {
	if r.Flags&uint32(libvirt.MigratePersistDest) == 0 || s.settleDefinitionNow(log, r, targetPersisted) {
		s.forgetDrive(r.ID)
	}
}

// recovers says whether a broken post-copy of r is resumed.
func (s *Source) recovers(r drivenRecord) bool {
	return r.Flags&uint32(libvirt.MigratePostcopy) != 0 && s.cfg.PostCopyRecoveryTimeout > 0
}

func (r drivenRecord) info(tls bool) api.ProxyInfo {
	return api.ProxyInfo{MigrationID: r.ID, Target: r.Target, TargetNode: r.TargetNode, TLS: tls}
}

// recoveredThere settles a post-copy the previous ferryd was resuming, if
// the target says it completed there meanwhile (its stored "split" from
// before would say otherwise).
func (s *Source) recoveredThere(ctx context.Context, log *zap.Logger, r drivenRecord, c *libvirtx.Conn) bool {
	var resp peer.ControlResponse
	var err error
	// Asked until the target says for certain (running, or split): its
	// stored "split" from before the recovery is not its last word.
	for give := time.Now().Add(recoveredWait); ; {
		actx, cancel := context.WithTimeout(ctx, recoverAskTimeout)
		resp, err = s.proxy.ControlTo(actx, r.Target, r.TargetOwner, peer.ControlRequest{Op: peer.OpRecovered, Migration: r.TargetID, Domain: r.Domain})
		cancel()
		var ce *peer.ControlError
		settled := err == nil || errors.As(err, &ce) && ce.Reason == peer.ReasonUnknownMigration
		if settled || time.Now().After(give) || ctx.Err() != nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if err != nil || resp.Outcome != peer.OutcomeRunning {
		return false
	}
	s.books.DriveSettled(r.Socket, r.Domain, r.UUID, r.Started, r.info(s.proxy.TLS()), api.PhaseCompleted, "")
	log.Warn("the post-copy being resumed when ferryd stopped completed meanwhile: the guest runs on the target")
	s.forgetSettled(log, r, resp.Persisted)
	return true
}

// recoverAfterRestart resumes the broken post-copy a previous ferryd left,
// or one an operator started again; why says which.
func (s *Source) recoverAfterRestart(log *zap.Logger, r drivenRecord, c *libvirtx.Conn, dom libvirt.Domain, info api.ProxyInfo, why string) {
	log.Warn(why + ": resuming the migration")
	resp, err := s.recoverPostCopy(log, MigrateRequest{Domain: r.Domain, Target: r.Target}, c, dom, r.TargetID, r.TargetOwner, nil)
	failure := ""
	if err != nil {
		failure = why + ", and " + err.Error()
	}
	info.Ended = true
	s.books.DriveEnded(r.Domain, dom, r.Socket, r.Started, info, failure)
	if errors.Is(err, errGivenUp) {
		s.keepForRecover(log, r)
		return
	}
	s.forgetSettled(log, r, err == nil && resp.Persisted)
}

// applyOutcome makes this node's copy follow the target's word: with the
// guest running there, a copy left paused by the migration here is
// destroyed (and its definition removed, when the migration was to move
// it); with none there, it runs again. A domain of the name that is not
// the migration's guest (another UUID), or one paused for another reason,
// is left alone.
func applyOutcome(ctx context.Context, c *libvirtx.Conn, r drivenRecord, outcome string) (string, error) {
	dom, absent, err := recordedDomain(ctx, c, r)
	if absent != "" || err != nil {
		return absent, err
	}
	if st, jerr := c.JobStats(ctx, dom, false); jerr == nil && st.Type.Active() {
		return "", fmt.Errorf("domain %s still has a libvirt job", r.Domain)
	}
	state, reason, err := c.DomainState(ctx, dom)
	if err != nil {
		return "", err
	}
	pausedByMigration := state == libvirtx.StatePaused && reason == int32(libvirt.DomainPausedMigration)
	if r.StalePaused && state == libvirtx.StatePaused {
		// Paused by this node's guard: as if by the migration.
		pausedByMigration = true
	}
	switch {
	case outcome == peer.OutcomeRunning && state == libvirtx.StateRunning && libvirtx.InPostCopy(state, reason):
		// QEMU started this node's copy again after the switch, having
		// failed the migration in its completion: the stale one goes.
		if err := c.Destroy(ctx, dom); err != nil {
			return "", fmt.Errorf("the guest runs on the target, and QEMU here started its copy again after the switch; destroying it: %w", err)
		}
		return "the stale copy QEMU here had started again after the switch was destroyed, as Confirm would have", nil
	case outcome == peer.OutcomeRunning && state == libvirtx.StateRunning && reason == int32(libvirt.DomainRunningMigrationCanceled):
		// libvirt resumed its copy by itself after the guest was handed
		// over (its libvirtd restarted between the target's Finish and
		// Confirm): two copies run on one guest's disks, and this one is
		// the stale one. It goes, as Confirm would have taken it.
		if err := c.Destroy(ctx, dom); err != nil {
			return "", fmt.Errorf("the guest runs on the target, and libvirt here resumed its own stale copy by itself; destroying it: %w", err)
		}
		return "the stale copy libvirt here had resumed by itself after the handover was destroyed, as Confirm would have", nil
	case outcome == peer.OutcomeRunning && state == libvirtx.StateRunning:
		// Never destroy a copy that runs: the target's word and this
		// node disagree, which an operator must see.
		return "", errLeftForOperator
	case outcome == peer.OutcomeRunning && pausedByMigration:
		if err := c.Destroy(ctx, dom); err != nil {
			return "", err
		}
		// Its definition follows the target's word (see
		// settleDefinition).
		return "the copy left paused here was destroyed", nil
	case outcome == peer.OutcomeStopped && r.StalePaused && state == libvirtx.StatePaused:
		if err := continueCopy(ctx, c, dom); err != nil {
			return "", err
		}
		return "the copy paused here after the switch runs again: the target's never ran", nil
	case outcome == peer.OutcomeStopped && pausedByMigration:
		if err := c.Resume(ctx, dom); err != nil {
			return "", err
		}
		return "the copy left paused here runs again", nil
	}
	return fmt.Sprintf("this node's copy is %s (reason %d): left as it is", state, reason), nil
}

// errLeftForOperator: the target's word and this node disagree in a way
// no retry changes (the guest runs on both): an operator decides.
var errLeftForOperator = errors.New("the guest runs both here and on the target: left for an operator (ferryctl resolve --keep source|target, or destroy the copy that must not run)")

// recordedDomain is r's guest on this node; when it is not here (no
// domain of its name, or another guest given the name since), absent says
// so, and nothing is to be done to it.
func recordedDomain(ctx context.Context, c *libvirtx.Conn, r drivenRecord) (dom libvirt.Domain, absent string, err error) {
	dom, err = c.LookupDomain(ctx, r.Domain)
	switch {
	case libvirtx.IsNoDomain(err):
		return dom, "no copy here", nil
	case err != nil:
		return dom, "", err
	case libvirtx.UUIDString(dom.UUID) != r.UUID:
		return dom, "the domain of that name here is another guest now (UUID " + libvirtx.UUIDString(dom.UUID) + "): left alone", nil
	}
	return dom, "", nil
}

// waitConn waits for this node's connection to socket, however long its
// file is missing; nil once ctx ends.
func (s *Source) waitConn(ctx context.Context, socket string) *libvirtx.Conn {
	c, _ := s.waitConnWhileThere(ctx, socket, 0)
	return c
}
