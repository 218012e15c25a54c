//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
)

// Ferry's phases are checked against what libvirt itself shows, read here
// straight from each node's libvirtd: a tracker that only agrees with
// itself can call a migration Completed whose guest died on the way.

// phaseLost is a source job Ferry stopped following because its libvirt
// socket went away: the outcome is unknown to that node.
const phaseLost api.Phase = "Lost"

// libvirt's numeric states and reasons, as go-libvirt returns them.
const (
	stRunning         = int32(libvirt.DomainRunning)
	stPaused          = int32(libvirt.DomainPaused)
	stShutoff         = int32(libvirt.DomainShutoff)
	rsMigrated        = int32(libvirt.DomainRunningMigrated)
	rsShutoffMigrated = int32(libvirt.DomainShutoffMigrated)
	// running/post-copy: normal on the target; on the source it means the
	// source resumed its own vCPUs after post-copy failed (split brain).
	rsRunningPostCopy       = int32(libvirt.DomainRunningPostcopy)
	rsRunningPostCopyFailed = int32(libvirt.DomainRunningPostcopyFailed)
	rsPausedPostCopyFailed  = int32(libvirt.DomainPausedPostcopyFailed)

	jobCompleted = int32(libvirt.DomainJobCompleted)
	jobFailed    = int32(libvirt.DomainJobFailed)
	jobCancelled = int32(libvirt.DomainJobCancelled)
)

// completedStats is what libvirt keeps of a domain's last finished job.
type completedStats struct {
	Type          int32
	Operation     int32
	DowntimeMs    uint64
	ElapsedMs     uint64
	DataTotal     uint64
	DataProcessed uint64
	DataRemaining uint64
	Iteration     uint64
	ErrMsg        string
}

func (s *completedStats) String() string {
	if s == nil {
		return "none"
	}
	name := map[int32]string{jobCompleted: "completed", jobFailed: "failed", jobCancelled: "cancelled"}[s.Type]
	if name == "" {
		name = fmt.Sprint(s.Type)
	}
	out := fmt.Sprintf("%s (operation %d, downtime %d ms, data total %d processed %d remaining %d, iteration %d)",
		name, s.Operation, s.DowntimeMs, s.DataTotal, s.DataProcessed, s.DataRemaining, s.Iteration)
	if s.ErrMsg != "" {
		out += ": " + s.ErrMsg
	}
	return out
}

// nodeTruth is one node's libvirt view of a domain.
type nodeTruth struct {
	Node          string
	Present       bool
	State, Reason int32
	// Stats are the completed-job statistics, nil when libvirt keeps none.
	Stats    *completedStats
	StatsErr string
}

func (n nodeTruth) running() bool { return n.Present && n.State == stRunning }

// migratedHere: the guest runs on this node as the product of a finished
// migration (pre-copy or post-copy alike end as running/migrated).
func (n nodeTruth) migratedHere() bool { return n.running() && n.Reason == rsMigrated }

// migratedAway: a transient domain is gone once migrated; a persistent one
// (KubeVirt's) stays defined, shut off as migrated.
func (n nodeTruth) migratedAway() bool {
	return !n.Present || (n.State == stShutoff && n.Reason == rsShutoffMigrated)
}

func (n nodeTruth) postCopyFailedSource() bool {
	return n.Present && ((n.State == stPaused && n.Reason == rsPausedPostCopyFailed) ||
		(n.State == stRunning && n.Reason == rsRunningPostCopy))
}

func (n nodeTruth) postCopyFailedTarget() bool {
	return n.running() && n.Reason == rsRunningPostCopyFailed
}

func (n nodeTruth) String() string {
	if !n.Present {
		return "absent"
	}
	names := map[[2]int32]string{
		{stRunning, 1}: "running/booted", {stRunning, rsMigrated}: "running/migrated",
		{stRunning, rsRunningPostCopy}: "running/post-copy", {stRunning, rsRunningPostCopyFailed}: "running/post-copy-failed",
		{stPaused, 2}: "paused/migration", {stPaused, 7}: "paused/post-copy", {stPaused, rsPausedPostCopyFailed}: "paused/post-copy-failed",
		{stShutoff, 5}: "shutoff/failed",
	}
	s := names[[2]int32{n.State, n.Reason}]
	return fmt.Sprintf("%s (%d/%d)", s, n.State, n.Reason)
}

// readNodeTruth reads the domain's state and completed-job statistics from
// the node's libvirtd. The statistics are read with KEEP_COMPLETED: a plain
// read deletes them, and then Ferry (or KubeVirt) could not read them.
func readNodeTruth(node, domain string) (nodeTruth, error) {
	l, err := bed.Libvirt(node)
	if err != nil {
		return nodeTruth{}, err
	}
	defer l.Disconnect()
	nt := nodeTruth{Node: node}
	// go-libvirt has no call deadline, and a target in post-copy-failed can
	// hold its domain's lock for 30 s: bound each call.
	call := func(what string, f func() error) error {
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return fmt.Errorf("libvirtd on %s: %s did not answer within 10s", node, what)
		}
	}
	var dom libvirt.Domain
	err = call("lookup", func() (err error) { dom, err = l.DomainLookupByName(domain); return err })
	if libvirt.IsNotFound(err) {
		return nt, nil
	}
	if err != nil {
		return nt, fmt.Errorf("looking %s up on %s: %w", domain, node, err)
	}
	err = call("state", func() (err error) { nt.State, nt.Reason, err = l.DomainGetState(dom, 0); return err })
	if libvirt.IsNotFound(err) {
		return nt, nil // gone between the lookup and the state
	}
	if err != nil {
		return nt, fmt.Errorf("state of %s on %s: %w", domain, node, err)
	}
	nt.Present = true
	if nt.postCopyFailedSource() || nt.postCopyFailedTarget() {
		return nt, nil // no completed job in that state, and calls may block
	}
	err = call("completed job stats", func() error {
		typ, params, err := l.DomainGetJobStats(dom, libvirt.DomainJobStatsCompleted|libvirt.DomainJobStatsKeepCompleted)
		if err != nil {
			return err
		}
		if typ != int32(libvirt.DomainJobNone) {
			nt.Stats = decodeStats(typ, params)
		}
		return nil
	})
	if err != nil {
		nt.StatsErr = err.Error()
	}
	return nt, nil
}

func decodeStats(typ int32, params []libvirt.TypedParam) *completedStats {
	s := &completedStats{Type: typ}
	for _, p := range params {
		switch p.Field {
		case "operation":
			s.Operation = int32(asUint(p.Value.I))
		case "downtime":
			s.DowntimeMs = asUint(p.Value.I)
		case "time_elapsed":
			s.ElapsedMs = asUint(p.Value.I)
		case "data_total":
			s.DataTotal = asUint(p.Value.I)
		case "data_processed":
			s.DataProcessed = asUint(p.Value.I)
		case "data_remaining":
			s.DataRemaining = asUint(p.Value.I)
		case "memory_iteration":
			s.Iteration = asUint(p.Value.I)
		case "errmsg":
			s.ErrMsg, _ = p.Value.I.(string)
		}
	}
	return s
}

func asUint(v any) uint64 {
	switch x := v.(type) {
	case int32:
		return uint64(x)
	case uint32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint64:
		return x
	}
	return 0
}

// outcome is one migration's end: Ferry's job on each node and libvirt's truth.
type outcome struct {
	Domain           string
	Src, Dst         api.Job
	HaveSrc, HaveDst bool
	TSrc, TDst       nodeTruth
}

func (o outcome) String() string {
	job := func(have bool, j api.Job) string {
		if !have {
			return "no job"
		}
		s := fmt.Sprintf("%s/%s mode %s, domainState %q, downtime %d ms, data total %d processed %d",
			j.Phase, j.Role, j.Mode, j.DomainState, j.DowntimeMs, j.DataTotalBytes, j.DataProcessedBytes)
		if j.FailureReason != "" {
			s += ", reason: " + j.FailureReason
		}
		return s
	}
	return fmt.Sprintf("ferry on %s (source): %s\nferry on %s (target): %s\nlibvirt on %s: %s, completed stats %s%s\nlibvirt on %s: %s, completed stats %s%s",
		o.TSrc.Node, job(o.HaveSrc, o.Src), o.TDst.Node, job(o.HaveDst, o.Dst),
		o.TSrc.Node, o.TSrc, o.TSrc.Stats, errNote(o.TSrc.StatsErr), o.TDst.Node, o.TDst, o.TDst.Stats, errNote(o.TDst.StatsErr))
}

func errNote(e string) string {
	if e == "" {
		return ""
	}
	return " (stats error: " + e + ")"
}

// violations lists every way Ferry's records disagree with libvirt's.
func (o outcome) violations() []string {
	var v []string
	add := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }
	s, d := o.TSrc, o.TDst
	var sp, dp api.Phase
	if o.HaveSrc {
		sp = o.Src.Phase
	} else {
		add("the source node recorded no job for this migration")
	}
	if o.HaveDst {
		dp = o.Dst.Phase
	}
	if sp == api.PhaseRunning {
		add("the source job is still Running")
	}
	if dp == api.PhaseRunning {
		add("the target job is still Running")
	}
	// libvirt moved the guest: the source's copy is gone, the target's runs.
	migrated := s.migratedAway() && d.migratedHere()
	if s.running() && d.running() && !d.postCopyFailedTarget() && !s.postCopyFailedSource() {
		add("libvirt runs the guest on both nodes (%s, %s)", s, d)
	}

	for _, c := range []struct {
		who string
		p   api.Phase
	}{{"source", sp}, {"target", dp}} {
		if c.p == api.PhaseCompleted && !migrated {
			add("the %s job says Completed but libvirt shows source %s, target %s: the guest is not running on the target as migrated", c.who, s, d)
		}
	}
	switch sp {
	case api.PhaseAborted:
		if !s.running() {
			add("the source job says Aborted but the guest is not running on the source (%s)", s)
		}
		if d.Present {
			add("the source job says Aborted but the domain is still on the target (%s)", d)
		}
		if s.Stats != nil && s.Stats.Type != jobCancelled {
			add("the source job says Aborted but libvirt's completed job on the source is %s", s.Stats)
		}
		if o.HaveDst && dp != api.PhaseFailed && dp != api.PhaseAborted {
			add("the source job says Aborted but the target job says %s", dp)
		}
	case api.PhaseFailed:
		if d.postCopyFailedTarget() || s.postCopyFailedSource() {
			add("the source job says Failed but libvirt shows a failed post-copy (source %s, target %s)", s, d)
		}
		if o.HaveDst && dp == api.PhaseCompleted {
			add("the source job says Failed but the target job says Completed")
		}
	case api.PhasePostCopyFailed:
		if !s.postCopyFailedSource() {
			add("the source job says PostCopyFailed but the source is %s, not paused/post-copy-failed or running/post-copy", s)
		}
		if !d.postCopyFailedTarget() {
			add("the source job says PostCopyFailed but the target is %s, not running/post-copy-failed", d)
		}
	}
	switch dp {
	case api.PhasePostCopyFailed:
		if !d.postCopyFailedTarget() {
			add("the target job says PostCopyFailed but the target is %s, not running/post-copy-failed", d)
		}
	case api.PhaseFailed, api.PhaseAborted:
		if d.postCopyFailedTarget() {
			add("the target job says %s but the target is running/post-copy-failed", dp)
		}
	}

	// And the other way round: what libvirt shows demands a phase.
	if migrated {
		if sp != api.PhaseCompleted && sp != phaseLost && o.HaveSrc {
			add("libvirt completed the migration (source %s, target %s) but the source job says %s", s, d, sp)
		}
		if dp != api.PhaseCompleted {
			add("libvirt completed the migration but the target job says %q", dp)
		}
	}
	if s.postCopyFailedSource() && d.postCopyFailedTarget() {
		if sp != api.PhasePostCopyFailed && sp != phaseLost {
			add("libvirt shows a failed post-copy (source %s, target %s) but the source job says %s", s, d, sp)
		}
		if dp != api.PhasePostCopyFailed {
			add("libvirt shows a failed post-copy but the target job says %q", dp)
		}
	}
	if !migrated && !d.postCopyFailedTarget() && !s.postCopyFailedSource() && o.HaveSrc &&
		sp != api.PhaseFailed && sp != api.PhaseAborted && sp != phaseLost && sp != api.PhaseRunning && sp != api.PhaseCompleted {
		add("the migration did not complete (source %s, target %s) but the source job says %s", s, d, sp)
	}
	if s.Stats != nil && s.Stats.Operation == 5 {
		switch {
		case s.Stats.Type == jobCancelled && sp != api.PhaseAborted && sp != phaseLost:
			add("libvirt says the migration was cancelled (%s) but the source job says %s", s.Stats, sp)
		case s.Stats.Type == jobFailed && sp != api.PhaseFailed && sp != phaseLost:
			add("libvirt says the migration failed (%s) but the source job says %s", s.Stats, sp)
		}
	}

	// After pre-copy libvirt keeps the completed job's figures on the
	// target; they are the only figures that side has, and Ferry's must be
	// exactly them.
	if migrated && dp == api.PhaseCompleted && o.Src.Mode != api.ModePostCopy && o.Dst.Mode != api.ModePostCopy {
		switch {
		case d.Stats == nil:
			add("libvirt keeps no completed-job statistics on the target after a pre-copy migration%s (read without VIR_DOMAIN_JOB_STATS_KEEP_COMPLETED, they are deleted)", errNote(d.StatsErr))
		case d.Stats.Type != jobCompleted:
			add("libvirt's completed job on the target is %s, not completed", d.Stats)
		case o.Dst.DowntimeMs != d.Stats.DowntimeMs || o.Dst.DataTotalBytes != d.Stats.DataTotal || o.Dst.DataProcessedBytes != d.Stats.DataProcessed:
			add("the target job's figures (downtime %d ms, data total %d, processed %d) are not libvirt's (%s)",
				o.Dst.DowntimeMs, o.Dst.DataTotalBytes, o.Dst.DataProcessedBytes, d.Stats)
		}
	}
	return v
}

// readOutcome reads Ferry's newest job for the domain on both nodes (taken
// as this migration's only if its role fits and it started after since) and
// libvirt's truth.
func readOutcome(t *testing.T, domain, src, dst string, since time.Time) outcome {
	t.Helper()
	o := outcome{Domain: domain}
	mine := func(j api.Job, role api.Role) bool {
		return j.Role == role && !j.StartTime.Before(since.Add(-2*time.Second))
	}
	if j, ok := ferryOn(src).job(domain); ok && mine(j, api.RoleSource) {
		o.Src, o.HaveSrc = j, true
	}
	if j, ok := ferryOn(dst).job(domain); ok && mine(j, api.RoleTarget) {
		o.Dst, o.HaveDst = j, true
	}
	var err error
	if o.TSrc, err = readNodeTruth(src, domain); err != nil {
		t.Fatalf("libvirt truth: %v", err)
	}
	if o.TDst, err = readNodeTruth(dst, domain); err != nil {
		t.Fatalf("libvirt truth: %v", err)
	}
	return o
}

// assertTruth waits for Ferry's jobs of this migration to end on both nodes
// and fails the test unless they agree with libvirt. Where libvirt and
// Ferry are still settling (the target's figures are read after its
// completion event) it re-reads both for a while; a disagreement that
// lasts is reported in full.
func assertTruth(t *testing.T, domain, src, dst string, since time.Time) outcome {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	settle := time.Time{}
	var o outcome
	var v []string
	for {
		o = readOutcome(t, domain, src, dst, since)
		v = o.violations()
		if len(v) == 0 {
			break
		}
		// Once a job has ended, the rest gets 10 s to settle: the other
		// node's job ends within moments, the target's figures are read
		// right after its completion event.
		ended := (o.HaveSrc && o.Src.Phase.Finished()) || (o.HaveDst && o.Dst.Phase.Finished())
		if ended && settle.IsZero() {
			settle = time.Now().Add(10 * time.Second)
		}
		if time.Now().After(deadline) || (!settle.IsZero() && time.Now().After(settle)) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(v) > 0 {
		t.Errorf("Ferry's records disagree with libvirt on %s:\n  - %s\n%s", domain, strings.Join(v, "\n  - "), o)
		return o
	}
	// A guest libvirt calls running must also be alive: its console keeps printing.
	for _, n := range []nodeTruth{o.TSrc, o.TDst} {
		if n.running() && !n.postCopyFailedTarget() && !n.postCopyFailedSource() && !consoleAdvances(n.Node, domain, 4*time.Second) {
			t.Errorf("libvirt says %s runs on %s (%s) but its console there printed nothing for 4s", domain, n.Node, n)
		}
	}
	t.Logf("truth for %s:\n%s", domain, o)
	return o
}

// consoleAdvances reports whether the guest printed on that node's console
// within d (the guest prints a line every second while it lives).
func consoleAdvances(node, domain string, d time.Duration) bool {
	path := filepath.Join(bed.Node(node).Dir, "run", "consoles", "console-"+domain+".log")
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	start := size()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if s := size(); s > start && start >= 0 {
			return true
		}
	}
	return false
}
