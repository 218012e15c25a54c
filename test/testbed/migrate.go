package testbed

import (
	"context"
	"errors"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// MigrateSpec describes one live migration. PostCopyAfter > 0 implies
// PostCopy and switches to post-copy that long after the migration starts.
// BandwidthMiBs limits pre-copy only; QEMU runs post-copy unlimited unless
// PostCopyBandwidthMiBs is set, which is how a test keeps a post-copy phase
// open long enough to break it.
type MigrateSpec struct {
	Name                  string
	From, To              string
	PostCopy              bool
	PostCopyAfter         time.Duration
	AutoConverge          bool
	BandwidthMiBs         int
	PostCopyBandwidthMiBs int
	// Parallel opens that many multifd connections for the memory stream
	// (Ferry's proxy only).
	Parallel int
	// Compression, with Ferry driving, is none, zstd or auto (see
	// api.MigrateRequest).
	Compression string
	// DataPath, with Ferry driving, is proxy or direct (QEMU straight to
	// QEMU under its own TLS; needs TargetNode).
	DataPath string
	// Via is "ferry" (the source ferryd drives the migration through Ferry's
	// proxy; the default when ferryd runs), "socat" (the bed's own relays)
	// or "raw" (libvirt's own client, QEMU's stream over plain TCP straight
	// to the target's QEMU).
	Via string
	// Policy and MaxDowntimeMs set the convergence policy of a migration
	// Ferry drives (observe, advise or act; empty: the node's).
	Policy        string
	MaxDowntimeMs uint64
	// Deadline, with Ferry driving, shortens the migration's deadline.
	Deadline time.Duration
	// TargetNode, with Ferry's proxy, is the node the target's
	// certificate must name.
	TargetNode string
	// Started, when set, hears the ID ferryd gave a migration it drives,
	// once ferryd accepted it: a driver acting on the migration while it
	// runs needs to know which job is this one.
	Started func(migrationID string)
}

// Migrate live-migrates a guest peer-to-peer the way KubeVirt does: the
// source libvirtd reaches the target's libvirtd and QEMU only through
// per-migration relays across the veth. It blocks until libvirt's migrate
// call returns and returns that call's error.
func (b *Bed) Migrate(ctx context.Context, m MigrateSpec) error {
	if err := checkGuestName(m.Name); err != nil {
		return err
	}
	for _, n := range []string{m.From, m.To} {
		if _, err := lookupNode(n); err != nil {
			return err
		}
	}
	if m.From == m.To {
		return fmt.Errorf("testbed: cannot migrate %s from node %s to itself", m.Name, m.From)
	}
	if m.BandwidthMiBs < 0 || m.PostCopyBandwidthMiBs < 0 {
		return fmt.Errorf("testbed: negative bandwidth for %s", m.Name)
	}
	switch m.Via {
	case "":
		if b.cfg.FerrydBin != "" {
			return b.migrateViaFerry(ctx, m)
		}
	case "ferry":
		if b.cfg.FerrydBin == "" {
			return fmt.Errorf("testbed: migrating %s via ferry needs a bed with ferryd (up --ferryd)", m.Name)
		}
		return b.migrateViaFerry(ctx, m)
	case "socat", "raw":
		if m.Parallel > 0 {
			return fmt.Errorf("testbed: --parallel needs Ferry's proxy, not %s", m.Via)
		}
	default:
		return fmt.Errorf("testbed: unknown relay %q for %s (ferry, socat or raw)", m.Via, m.Name)
	}
	l, err := b.Libvirt(m.From)
	if err != nil {
		return err
	}
	defer l.Disconnect()
	dom, err := l.DomainLookupByName(m.Name)
	if err != nil {
		return fmt.Errorf("testbed: guest %s on node %s: %w", m.Name, m.From, err)
	}
	r, err := b.startRelays(m.Name, m.From, m.To)
	if r != nil {
		defer b.finishRelays(r)
	}
	if err != nil {
		return err
	}
	if err := b.NoteConsoleMove(m.Name, m.To); err != nil {
		return err
	}

	flags := libvirt.MigrateLive | libvirt.MigratePeer2peer
	if m.PostCopy || m.PostCopyAfter > 0 {
		flags |= libvirt.MigratePostcopy
	}
	if m.AutoConverge {
		flags |= libvirt.MigrateAutoConverge
	}
	memURI := "unix://" + migDirInNode(m.Name) + "/qemu.sock"
	if m.Via == "raw" {
		// QEMU straight to QEMU over plain TCP, as libvirt's own client
		// migrates on a trusted network: the baseline no relay can beat.
		to, _ := lookupNode(m.To)
		memURI = "tcp://" + to.ip
	}
	params := []libvirt.TypedParam{{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString(memURI)}}
	if m.BandwidthMiBs > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidth, Value: *libvirt.NewTypedParamValueUllong(uint64(m.BandwidthMiBs))})
	}
	if m.PostCopyBandwidthMiBs > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidthPostcopy, Value: *libvirt.NewTypedParamValueUllong(uint64(m.PostCopyBandwidthMiBs))})
	}
	dconnuri := "qemu+unix:///system?socket=" + migDirInNode(m.Name) + "/libvirt.sock"

	logf(b.cfg.Log, "migrating %s %s -> %s (flags %#x)", m.Name, m.From, m.To, uint32(flags))
	t0 := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := l.DomainMigratePerform3Params(dom, libvirt.OptString{dconnuri}, params, nil, flags)
		done <- err
	}()
	var switchC <-chan time.Time
	if m.PostCopyAfter > 0 {
		t := time.NewTimer(m.PostCopyAfter)
		defer t.Stop()
		switchC = t.C
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				logf(b.cfg.Log, "migration of %s failed after %.1fs: %v", m.Name, time.Since(t0).Seconds(), err)
				return fmt.Errorf("testbed: migrating %s %s -> %s: %w", m.Name, m.From, m.To, err)
			}
			logf(b.cfg.Log, "migrated %s %s -> %s in %.1fs", m.Name, m.From, m.To, time.Since(t0).Seconds())
			return nil
		case <-switchC:
			// Asked before QEMU's migration is active (a busy machine),
			// the switch is refused: it is asked again until it is taken
			// or the migration ends.
			if err := l.DomainMigrateStartPostCopy(dom, 0); err != nil {
				switchC = time.After(200 * time.Millisecond)
				continue
			}
			switchC = nil
			logf(b.cfg.Log, "switched %s to post-copy after %.1fs", m.Name, time.Since(t0).Seconds())
		case <-ctx.Done():
			return b.abortMigration(l, dom, done, ctx.Err())
		}
	}
}

// abortMigration cancels a pre-copy job; post-copy cannot be aborted, so
// after a grace period the connection is dropped to unblock the call.
func (b *Bed) abortMigration(l *libvirt.Libvirt, dom libvirt.Domain, done <-chan error, cause error) error {
	if err := l.DomainAbortJob(dom); err != nil {
		logf(b.cfg.Log, "aborting migration of %s: %v", dom.Name, err)
	}
	select {
	case err := <-done:
		return errors.Join(cause, err)
	case <-time.After(30 * time.Second):
		_ = l.Disconnect()
		return fmt.Errorf("testbed: migration of %s still running 30s after abort: %w", dom.Name, cause)
	}
}

// NoteConsoleMove records where the target's console file stands before the
// target QEMU can append to it.
func (b *Bed) NoteConsoleMove(guest, to string) error {
	return withLock(b.cfg.Dir, func() error {
		var gs guestState
		if err := readJSON(guestPath(b.cfg.Dir, guest), &gs); err != nil {
			gs = guestState{Name: guest, Segments: []segment{{Node: peerOf(to).name}}}
		}
		gs.Segments = append(gs.Segments, segment{Node: to, Offset: fileSize(consolePath(b.nodes[to], guest))})
		return writeJSON(guestPath(b.cfg.Dir, guest), gs)
	})
}
