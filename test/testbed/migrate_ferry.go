package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ferry-vm/ferry/api"
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
	body, _ := json.Marshal(api.MigrateRequest{
		Domain: m.Name, Target: dst.ProxyAddr,
		PostCopy: m.PostCopy, PostCopyAfterSeconds: m.PostCopyAfter.Seconds(),
		AutoConverge: m.AutoConverge, BandwidthMiBs: m.BandwidthMiBs,
		PostCopyBandwidthMiBs: m.PostCopyBandwidthMiBs, Parallel: m.Parallel, Compression: m.Compression, DataPath: m.DataPath,
		Policy: m.Policy, MaxDowntimeMs: m.MaxDowntimeMs, TargetNode: m.TargetNode,
		DeadlineSeconds: m.Deadline.Seconds(),
	})
	hc := unixHTTPClient(src.DebugSocket)
	resp, err := hc.Post("http://ferryd/v1/migrations", "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("testbed: asking ferryd on %s to migrate %s: %w", m.From, m.Name, err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("testbed: ferryd on %s refused to migrate %s: %d %s", m.From, m.Name, resp.StatusCode, bytes.TrimSpace(rb))
	}
	var started api.MigrateResponse
	json.Unmarshal(rb, &started)
	if m.Started != nil {
		m.Started(started.MigrationID)
	}
	logf(b.cfg.Log, "migrating %s %s -> %s through Ferry's proxy (migration %s, tls %v)", m.Name, m.From, m.To, started.MigrationID, !b.plainProxy())
	t0 := time.Now()
	for {
		var j api.Job
		if r, err := hc.Get("http://ferryd/v1/jobs/" + m.Name); err == nil {
			if r.StatusCode == http.StatusOK {
				json.NewDecoder(r.Body).Decode(&j)
			}
			r.Body.Close()
		}
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
			hc.Post("http://ferryd/v1/jobs/"+m.Name+"/abort", "application/json", nil)
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
	resp, err := unixHTTPClient(b.nodes[node].DebugSocket).Get("http://ferryd/v1/jobs/" + domain)
	if err != nil {
		return api.Job{}, fmt.Errorf("testbed: ferryd on %s: %w", node, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return api.Job{}, fmt.Errorf("testbed: ferryd on %s has no job of %s: %d %s", node, domain, resp.StatusCode, bytes.TrimSpace(msg))
	}
	var j api.Job
	return j, json.NewDecoder(resp.Body).Decode(&j)
}
