package drive

import (
	"context"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
)

// A persistent guest's definition moves with it, and only once it runs on
// the target: libvirt's Finish there saves the checked definition before it
// starts the guest (see Target.finishCookie). Here, its autostart is off for
// the migration's whole length, so that a node rebooted meanwhile never
// starts a second copy of a guest that runs elsewhere; once the migration
// has ended, the definition here follows libvirt's truth on both nodes.

// holdAutostart turns a persistent guest's autostart off for its
// migration, before libvirt's Begin. From the migration's record on, a
// restarted ferryd gives it back if the guest stays; before it (a ferryd
// killed while the target prepares), it stays off: the side that never
// starts a second copy.
func holdAutostart(ctx context.Context, c *libvirtx.Conn, dom libvirt.Domain, on bool) error {
	if !on {
		return nil
	}
	if err := c.SetAutostart(ctx, dom, false); err != nil {
		return fmt.Errorf("turning the guest's autostart off for its migration (a node rebooted meanwhile would start a second copy): %w", err)
	}
	return nil
}

// giveAutostartBack turns autostart on again for a guest whose migration
// never started.
func giveAutostartBack(log *zap.Logger, c *libvirtx.Conn, dom libvirt.Domain, on bool, domain string) {
	if !on {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.SetAutostart(ctx, dom, true); err != nil {
		log.Error("the migration did not start, and the guest's autostart could not be turned on again: turn it on by hand (virsh autostart)", zap.String("domain", domain), zap.Error(err))
	}
}

// settleDefinition makes this node's definition of a migrated guest follow
// where the guest is, as libvirt has it now:
//   - it runs here (the migration failed and it stayed): its autostart, if
//     the migration turned it off, is on again;
//   - it is shut off here and the target says it is defined there: this
//     definition, and its autostart link, go;
//   - anything else (paused by the migration, in post-copy, the target not
//     defining it): left, autostart off, for the next settling or an
//     operator.
//
// It answers what it did, or an error to try again on.
func settleDefinition(ctx context.Context, c *libvirtx.Conn, rec drivenRecord, targetPersisted bool) (string, error) {
	dom, absent, err := recordedDomain(ctx, c, rec)
	if absent != "" || err != nil {
		return absent, err
	}
	persistent, err := c.Persistent(ctx, dom)
	if err != nil {
		return "", err
	}
	if !persistent {
		return "no definition here", nil
	}
	state, reason, err := c.DomainState(ctx, dom)
	if err != nil {
		return "", err
	}
	switch {
	case state == libvirtx.StateShutoff && targetPersisted:
		if err := c.Undefine(ctx, dom); err != nil && !libvirtx.IsNoDomain(err) {
			return "", err
		}
		return "the definition here was removed: the guest is defined on the target", nil
	case state == libvirtx.StateShutoff:
		return definitionKept, nil
	case libvirtx.InPostCopy(state, reason), state == libvirtx.StatePaused && reason == libvirtx.PausedMigration:
		return "the guest is held here by its migration: its autostart stays off", nil
	case targetPersisted:
		// The target runs the guest and keeps its definition, and a copy
		// is left here (an operator paused it): a boot here must not
		// start another.
		return "a copy is left here beside the target's: its autostart stays off, for an operator", nil
	case rec.Autostart:
		if err := c.SetAutostart(ctx, dom, true); err != nil {
			return "", err
		}
		return "the guest stays here: its autostart is on again", nil
	}
	return "the guest stays here", nil
}

// settleDefinitionNow settles the definition once; when that fails it
// goes on trying in the background, with backoff, through whichever
// connection to the node's libvirt works then, and keeps the migration's
// record until it has. It says whether the record may go now.
func (s *Source) settleDefinitionNow(log *zap.Logger, rec drivenRecord, targetPersisted bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	what, err := s.settleDefinitionOnce(ctx, rec, targetPersisted)
	cancel()
	if err == nil {
		log.Info("the guest's definition here is settled", zap.String("here", what))
		return true
	}
	log.Warn("the guest's definition here is not settled yet; trying again", zap.Error(err))
	go s.settleDefinitionLater(log, rec, targetPersisted)
	return false
}

func (s *Source) settleDefinitionOnce(ctx context.Context, rec drivenRecord, targetPersisted bool) (string, error) {
	c, err := s.cfg.Conns.Conn(rec.Socket)
	if err != nil {
		return "", fmt.Errorf("this node's libvirt is not connected: %w", err)
	}
	what, err := settleDefinition(ctx, c, rec, targetPersisted)
	if err == nil && what == definitionKept {
		// Its guest may come back onto it from where it went.
		if err := s.noteKept(ctx, c, rec); err != nil {
			return "", fmt.Errorf("noting the definition kept here for its guest: %w", err)
		}
	}
	return what, err
}

func (s *Source) noteKept(ctx context.Context, c *libvirtx.Conn, rec drivenRecord) error {
	dom, err := c.LookupDomain(ctx, rec.Domain)
	if err != nil {
		return err
	}
	hash, err := definitionHash(ctx, c, dom)
	if err != nil {
		return err
	}
	return noteKept(s.cfg.StateDir, rec, hash)
}

// definitionKept is settleDefinition's word for a definition that stays,
// shut off, for a guest its target runs without one.
const definitionKept = "the definition here stays, autostart off: the target did not say it keeps one"

// settleDefinitionLater retries until the definition is settled, then
// forgets the record.
func (s *Source) settleDefinitionLater(log *zap.Logger, rec drivenRecord, targetPersisted bool) {
	wait := time.Second
	for attempt := 2; ; attempt++ {
		time.Sleep(wait)
		wait = min(2*wait, definitionRetryMax)
		// Never beside a migration of the same guest, which holds its
		// autostart off for itself.
		key := driveKey(rec.Socket, rec.Domain)
		if !s.running.start(key) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		what, err := s.settleDefinitionOnce(ctx, rec, targetPersisted)
		cancel()
		s.running.end(key)
		if err == nil {
			log.Warn("the guest's definition here is settled", zap.String("here", what), zap.Int("attempts", attempt))
			s.forgetDrive(rec.ID)
			return
		}
		if attempt%10 == 0 {
			log.Error("the guest's definition here is still not settled; trying again", zap.Int("attempts", attempt), zap.Error(err))
		}
	}
}

// definitionRetryMax caps the wait between two tries.
const definitionRetryMax = time.Minute
