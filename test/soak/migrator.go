package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
)

// migration is one migration Ferry accepted (or may have: ID is empty
// when ferryd's answer was lost, as when it was killed meanwhile).
type migration struct {
	Guest    string
	K        int
	From, To string
	Plan     migrationPlan
	ID       string
	// Asking: ferryd has not answered the request yet.
	Asking bool
	Start  time.Time
	// The soak's restarts of each node's daemons when it began.
	FerrydEpoch, LibvirtdEpoch map[string]int
	// LaterAttempts counts the attempts refused since: one the target
	// refused may have begun a libvirt job on the source all the same,
	// which takes the place of this one's completed-job figures there.
	LaterAttempts int
	// Job is the source's record of it as the migrator last saw it.
	Job     api.Job
	HaveJob bool
}

func (m *migration) String() string {
	id := m.ID
	switch {
	case m.Asking:
		id = "not started yet"
	case id == "":
		id = "id unknown"
	}
	return fmt.Sprintf("%s %s->%s #%d (%s; %s)", m.Guest, m.From, m.To, m.K+1, m.Plan, id)
}

// mine says the job is the source's record of m.
func (m *migration) mine(j api.Job) bool {
	if j.Role != api.RoleSource {
		return false
	}
	if m.ID != "" {
		return j.Proxy != nil && j.Proxy.MigrationID == m.ID
	}
	return !j.StartTime.Before(m.Start.Add(-2 * time.Second))
}

// migrate moves guest g to the other node, again and again, while the
// gate is open, each migration as the seed plans it.
func (s *soak) migrate(ctx context.Context, g int, guest string) {
	k := 0
	for ctx.Err() == nil {
		if s.gate.enter(ctx) != nil {
			return
		}
		started := s.migrateOnce(ctx, g, guest, k)
		s.gate.leave()
		if started {
			k++
		} else {
			sleepCtx(ctx, 2*time.Second)
		}
	}
}

// migrateOnce runs the k-th migration of the guest and follows it to its
// end; false if none started (the guest not at rest, or ferryd refusing).
func (s *soak) migrateOnce(ctx context.Context, g int, guest string, k int) bool {
	p, err := readPlacement(s.bed, guest)
	from := p.home()
	if err != nil || from == "" {
		return false
	}
	m := &migration{Guest: guest, K: k, From: from, To: other(from), Plan: planMigration(s.o.seed, g, k), Start: time.Now()}
	s.mu.Lock()
	m.FerrydEpoch, m.LibvirtdEpoch = copyEpochs(s.ferrydEpoch), copyEpochs(s.libvirtdEpoch)
	prev := s.last[guest]
	s.last[guest], s.current[guest] = m, m
	m.Asking = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.current, guest)
		s.mu.Unlock()
	}()
	if err := s.bed.NoteConsoleMove(guest, m.To); err != nil {
		s.violate(fmt.Sprintf("the bed could not note %s's console move: %v", guest, err))
		return false
	}
	req := api.MigrateRequest{
		Domain: guest, Target: s.bed.Node(m.To).ProxyAddr, TargetNode: m.To,
		PostCopy: m.Plan.PostCopy, PostCopyAfterSeconds: m.Plan.PostCopyAfter.Seconds(),
		BandwidthMiBs: m.Plan.BandwidthMiBs, PostCopyBandwidthMiBs: m.Plan.PostCopyBandwidthMiBs,
		Policy: "observe",
	}
	resp, err := s.ferryd(m.From).Migrate(ctx, req, nil)
	s.mu.Lock()
	m.Asking = false
	if err == nil {
		m.ID = resp.MigrationID
	}
	s.mu.Unlock()
	var refused *client.Error
	switch {
	case ctx.Err() != nil:
		return false
	case errors.As(err, &refused):
		// Nothing started: the guest's previous migration is its last.
		s.mu.Lock()
		s.last[guest] = prev
		if prev != nil {
			prev.LaterAttempts++
		}
		s.mu.Unlock()
		s.logf("%s: ferryd on %s refused the migration to %s: %d %s", guest, m.From, m.To, refused.Status, refused.Message)
		return false
	case err != nil:
		// ferryd went away with the request: it may have started it.
		s.logf("%s: asking ferryd on %s to migrate it: %v (followed by its start time)", guest, m.From, err)
	}
	s.mu.Lock()
	s.migrations++
	s.mu.Unlock()
	s.follow(ctx, m)
	if ctx.Err() == nil {
		s.checkOutcome(ctx, m)
	}
	return true
}

func copyEpochs(e map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range e {
		out[k] = v
	}
	return out
}

// follow returns once the source's record of m has ended, or once, for
// 10 s, its ferryd has shown no record of m under way (one restarted
// since may have none).
func (s *soak) follow(ctx context.Context, m *migration) {
	c := s.ferryd(m.From)
	var quietSince time.Time
	for ctx.Err() == nil {
		j, err := c.Job(ctx, m.Guest)
		switch {
		case err == nil && m.mine(j):
			s.mu.Lock()
			m.Job, m.HaveJob = j, true
			s.mu.Unlock()
			if j.Phase.Finished() {
				s.logf("%s: %s after %.1fs%s", m, j.Phase, time.Since(m.Start).Seconds(), reasonText(j))
				return
			}
			quietSince = time.Time{}
		case err == nil && !j.Phase.Finished():
			quietSince = time.Time{}
		case err != nil && !errors.As(err, new(*client.Error)):
			// ferryd is away (killed, restarting): nothing to tell yet.
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) > 10*time.Second:
			s.logf("%s: ferryd on %s shows no record of it under way (latest: %s)", m, m.From, jobText(j, err))
			return
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

func reasonText(j api.Job) string {
	if j.FailureReason == "" {
		return ""
	}
	return ": " + j.FailureReason
}

func jobText(j api.Job, err error) string {
	if err != nil {
		return err.Error()
	}
	id := "-"
	if j.Proxy != nil {
		id = j.Proxy.MigrationID
	}
	return fmt.Sprintf("%s %s %s mode %s, migration %s, started %s%s", j.Domain, j.Role, j.Phase, j.Mode, id, j.StartTime.Format("15:04:05.000"), reasonText(j))
}

// checkOutcome compares, once the guest is at rest, where libvirt runs it
// with how the source's record says m ended, and finds that record in
// the source's history if the migrator never saw it. A guest not at rest
// within 20 s is left to the check after the next fault.
func (s *soak) checkOutcome(ctx context.Context, m *migration) {
	s.mu.Lock()
	j, have := m.Job, m.HaveJob
	s.mu.Unlock()
	if have && !j.Phase.Finished() {
		return
	}
	var p placement
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		p, err = readPlacement(s.bed, m.Guest)
		if err == nil && p.home() != "" {
			break
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, time.Second) {
			return
		}
	}
	if !have {
		found, ok, err := s.findJob(ctx, m.From, m.Guest, m.mine)
		switch {
		case err != nil || m.ID == "":
			return
		case ok && found.Phase.Finished():
			j = found
		case ok:
			return
		default:
			s.mu.Lock()
			kept := s.ferrydEpoch[m.From] == m.FerrydEpoch[m.From]
			s.mu.Unlock()
			if kept {
				s.violateRecords(fmt.Sprintf("%s: ferryd on %s, running throughout, drove it and has no record of it; libvirt shows the guest on %s (%s); its jobs of the guest: %s",
					m, m.From, p.home(), p, s.jobsText(ctx, m.From, m.Guest)), s.detail(m.Guest)...)
			}
			return
		}
	}
	home := p.home()
	switch {
	case j.Phase == api.PhaseCompleted && home != m.To:
		s.violateRecords(fmt.Sprintf("%s: the source's record says Completed, but libvirt runs the guest on %s (%s)", m, home, p), s.detail(m.Guest)...)
	case (j.Phase == api.PhaseFailed || j.Phase == api.PhaseAborted) && home != m.From:
		s.violateRecords(fmt.Sprintf("%s: the source's record says %s%s, but libvirt runs the guest on %s (%s)", m, j.Phase, reasonText(j), home, p), s.detail(m.Guest)...)
	case j.Phase == api.PhasePostCopyFailed:
		s.violateRecords(fmt.Sprintf("%s: the source's record says PostCopyFailed%s, yet libvirt shows the guest whole on %s (%s)", m, reasonText(j), home, p), s.detail(m.Guest)...)
	default:
		if j.Phase == api.PhaseCompleted {
			s.mu.Lock()
			s.completed++
			s.mu.Unlock()
		}
	}
}
