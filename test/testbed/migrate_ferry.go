package testbed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
)

// migrateViaFerry asks the source node's ferryd to drive the migration
// through Ferry's proxy, then follows the job until it ends.
func (b *Bed) migrateViaFerry(ctx context.Context, m MigrateSpec) error {
	src, dst := b.nodes[m.From], b.nodes[m.To]
	if m.TargetNode == "" && !b.plainProxy() {
		// Each node's certificate names it: the migration goes to that node.
		m.TargetNode = m.To
	}
	if err := b.NoteConsoleMove(m.Name, m.To); err != nil {
		return err
	}
	c := client.New(src.DebugSocket)
	started, err := c.Migrate(ctx, api.MigrateRequest{
		Domain: m.Name, Target: dst.ProxyAddr,
		PostCopy: m.PostCopy, PostCopyAfterSeconds: m.PostCopyAfter.Seconds(),
		AutoConverge: m.AutoConverge, BandwidthMiBs: m.BandwidthMiBs,
		PostCopyBandwidthMiBs: m.PostCopyBandwidthMiBs, Parallel: m.Parallel, Compression: m.Compression, DataPath: m.DataPath,
		Policy: m.Policy, MaxDowntimeMs: m.MaxDowntimeMs, TargetNode: m.TargetNode,
		DeadlineSeconds: m.Deadline.Seconds(),
	}, nil)
	var refused *client.Error
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("testbed: ferryd on %s refused to migrate %s: %d %s", m.From, m.Name, refused.Status, refused.Message)
	case err != nil:
		return fmt.Errorf("testbed: asking ferryd on %s to migrate %s: %w", m.From, m.Name, err)
	}
	if m.Started != nil {
		m.Started(started.MigrationID)
	}
	logf(b.cfg.Log, "migrating %s %s -> %s through Ferry's proxy (migration %s, tls %v)", m.Name, m.From, m.To, started.MigrationID, !b.plainProxy())
	t0 := time.Now()
	for {
		j, _ := c.Job(ctx, m.Name)
		if j.Phase.Finished() && j.Proxy != nil && j.Proxy.MigrationID == started.MigrationID {
			if j.Phase != api.PhaseCompleted {
				logf(b.cfg.Log, "migration of %s ended %s after %.1fs: %s", m.Name, j.Phase, time.Since(t0).Seconds(), j.FailureReason)
				return fmt.Errorf("testbed: migrating %s %s -> %s: %s: %s", m.Name, m.From, m.To, j.Phase, j.FailureReason)
			}
			logf(b.cfg.Log, "migrated %s %s -> %s in %.1fs", m.Name, m.From, m.To, time.Since(t0).Seconds())
			return nil
		}
		select {
		case <-ctx.Done():
			c.Abort(context.Background(), m.Name, false)
			return fmt.Errorf("testbed: migrating %s: %w (abort requested)", m.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Job is a node's ferryd's job for a domain: the latest, running or ended.
func (b *Bed) Job(node, domain string) (api.Job, error) {
	if _, err := lookupNode(node); err != nil {
		return api.Job{}, err
	}
	j, err := client.New(b.nodes[node].DebugSocket).Job(context.Background(), domain)
	var refused *client.Error
	switch {
	case errors.As(err, &refused):
		return api.Job{}, fmt.Errorf("testbed: ferryd on %s has no job of %s: %d %s", node, domain, refused.Status, refused.Message)
	case err != nil:
		return api.Job{}, fmt.Errorf("testbed: ferryd on %s: %w", node, err)
	}
	return j, nil
}
