package daemon

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

	"github.com/ferry-vm/ferry/internal/atomicfile"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/proxy"
)

// drivenRecord is a migration this node drives, kept on disk from before
// its Perform until it has ended, so that a ferryd restarted meanwhile
// settles it with the target and records it, rather than forget it with
// the guest perhaps left paused.
type drivenRecord struct {
	ID          string    `json:"id"`
	TargetID    string    `json:"targetId"`
	Domain      string    `json:"domain"`
	Socket      string    `json:"socket"`
	Target      string    `json:"target"`
	TargetOwner string    `json:"targetOwner,omitempty"`
	TargetNode  string    `json:"targetNode,omitempty"`
	Flags       uint32    `json:"flags"`
	Started     time.Time `json:"started"`
}

// drivenDir holds the records, one file per migration id.
const drivenDir = "driven-migrations"

var drivenID = regexp.MustCompile(`^m-[0-9a-f]{16}$`)

func (d *Daemon) drivenPath(id string) (string, bool) {
	if d.cfg.StateDir == "" || !drivenID.MatchString(id) {
		return "", false
	}
	return filepath.Join(d.cfg.StateDir, drivenDir, id+".json"), true
}

// recordDrive keeps r on disk; without a state directory nothing outlives
// this process.
func (d *Daemon) recordDrive(r drivenRecord) error {
	p, ok := d.drivenPath(r.ID)
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

func (d *Daemon) forgetDrive(id string) {
	if p, ok := d.drivenPath(id); ok {
		os.Remove(p)
	}
}

// recordedDrives are the records a previous ferryd left.
func (d *Daemon) recordedDrives() []drivenRecord {
	if d.cfg.StateDir == "" {
		return nil
	}
	dir := filepath.Join(d.cfg.StateDir, drivenDir)
	entries, _ := os.ReadDir(dir)
	var out []drivenRecord
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !drivenID.MatchString(id) {
			continue
		}
		var r drivenRecord
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil || r.ID != id || r.Domain == "" || r.Socket == "" {
			d.log.Warn("unreadable record of a driven migration, set aside", zap.String("file", e.Name()), zap.Error(err))
			os.Rename(filepath.Join(dir, e.Name()), filepath.Join(dir, e.Name()+".corrupt"))
			continue
		}
		out = append(out, r)
	}
	return out
}

// settleRecordedDrives settles the migrations a previous ferryd was
// driving when it stopped: each goes on in the background until settled.
func (d *Daemon) settleRecordedDrives(ctx context.Context) {
	if d.Proxy == nil {
		return
	}
	for _, r := range d.recordedDrives() {
		// No new migration of the domain starts until it is settled.
		key := r.Socket + "\x00" + r.Domain
		if !d.drives.start(key) {
			continue
		}
		go func() {
			defer d.drives.end(key)
			d.settleAfterRestart(ctx, r)
		}()
	}
}

// settleAfterRestart ends a migration this node was driving when its
// ferryd stopped. Its Perform cookie is gone with that process, so the
// migration cannot be completed: the target is told to drop its copy,
// unless it already runs the guest, and this node's copy follows the
// target's word. Only then is the record removed.
func (d *Daemon) settleAfterRestart(ctx context.Context, r drivenRecord) {
	log := d.log.With(zap.String("domain", r.Domain), zap.String("migration", r.ID), zap.String("target", r.Target))
	log.Warn("settling a migration this node was driving when its ferryd stopped")
	var outcome string
	var last error
	for attempt := 1; outcome == ""; attempt++ {
		resp, err := d.Proxy.ControlTo(ctx, r.Target, r.TargetOwner, proxy.ControlRequest{Op: proxy.OpFinish,
			Migration: r.TargetID, Domain: r.Domain, Cancelled: true})
		if outcome = settledOutcome(resp, err); outcome != "" {
			break
		}
		last = err
		if attempt == 1 || attempt%12 == 0 {
			log.Warn("the target has not said whether the guest runs there; asking again", zap.Int("attempt", attempt), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
	var c *libvirtx.Conn
	for c == nil {
		var err error
		if c, err = d.Tracker.ConnForSocket(r.Socket); err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
	what, err := applyOutcome(ctx, c, r, outcome)
	if err != nil {
		log.Error("cannot apply the target's word to this node's copy; the record stays for the next start", zap.String("outcome", outcome), zap.Error(err))
		return
	}
	info := migration.ProxyInfo{MigrationID: r.ID, Target: r.Target, TargetNode: r.TargetNode, TLS: d.Proxy.TLS()}
	phase, reason := migration.PhaseFailed, "ferryd restarted during the migration; the target dropped its copy: "+what
	switch outcome {
	case proxy.OutcomeRunning:
		phase, reason = migration.PhaseCompleted, ""
	case proxy.OutcomeSplit:
		phase, reason = migration.PhasePostCopyFailed, "ferryd restarted during the migration, and its post-copy failed: the guest's memory is split between the two nodes"
	}
	d.Tracker.DriveSettled(r.Socket, r.Domain, r.Started, info, phase, reason)
	d.forgetDrive(r.ID)
	log.Warn("migration settled after a restart", zap.String("outcome", outcome), zap.String("here", what), zap.NamedError("lastError", last))
}

// applyOutcome makes this node's copy follow the target's word: with the
// guest running there, a copy left paused here is destroyed (and its
// definition removed, when the migration was to move it); with none there,
// a copy left paused here runs again.
func applyOutcome(ctx context.Context, c *libvirtx.Conn, r drivenRecord, outcome string) (string, error) {
	dom, err := c.LookupDomain(ctx, r.Domain)
	if libvirtx.IsNoDomain(err) {
		return "no copy here", nil
	}
	if err != nil {
		return "", err
	}
	if st, jerr := c.JobStats(ctx, dom, false); jerr == nil && st.Type.Active() {
		return "", fmt.Errorf("domain %s still has a libvirt job", r.Domain)
	}
	state, _, err := c.DomainState(ctx, dom)
	if err != nil {
		return "", err
	}
	switch {
	case outcome == proxy.OutcomeRunning && state != libvirtx.StateShutoff:
		if state == libvirtx.StateRunning {
			// Never destroy a copy that runs: the target's word and this
			// node disagree, which an operator must see.
			return "", errors.New("the guest runs both here and on the target: left for an operator")
		}
		if err := c.Destroy(ctx, dom); err != nil {
			return "", err
		}
		if libvirt.DomainMigrateFlags(r.Flags)&libvirt.MigrateUndefineSource != 0 {
			if err := c.Undefine(ctx, dom); err != nil && !libvirtx.IsNoDomain(err) {
				return "", err
			}
		}
		return "the copy left paused here was destroyed", nil
	case outcome == proxy.OutcomeStopped && state == libvirtx.StatePaused:
		if err := c.Resume(ctx, dom); err != nil {
			return "", err
		}
		return "the copy left paused here runs again", nil
	}
	return "this node's copy is " + state.String(), nil
}
