package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// settleAndCheck waits for the bed to come to rest after a fault and
// checks every invariant; false once one is broken.
func (s *soak) settleAndCheck(ctx context.Context, guests []string, after string) bool {
	t0 := time.Now()
	if why := s.settle(ctx, guests); why != "" {
		if ctx.Err() == nil {
			s.violate(fmt.Sprintf("after %s the bed did not come to rest within %v: %s", after, s.o.settleTimeout, why), s.details(guests)...)
		}
		return false
	}
	s.logf("at rest %.1fs after %s; checking", time.Since(t0).Seconds(), after)
	for _, n := range nodes {
		if s.bed.FerrydPID(n) == 0 {
			s.violate(fmt.Sprintf("after %s ferryd on %s no longer runs, and nothing of the soak's stopped it", after, n))
		}
	}
	where := map[string]string{}
	for _, g := range guests {
		p, err := readPlacement(s.bed, g)
		switch {
		case err != nil:
			s.violate(fmt.Sprintf("after %s libvirt cannot say where %s runs: %v", after, g, err))
		case p.wrong() != "":
			s.violate(fmt.Sprintf("after %s %s: %s", after, g, p.wrong()), s.detail(g)...)
		default:
			where[g] = p.home()
		}
	}
	if s.failed() {
		return false
	}
	s.checkMemory(ctx, guests, after)
	if s.failed() {
		return false
	}
	s.checkRecords(ctx, guests, after)
	if s.failed() {
		return false
	}
	var at []string
	for _, g := range guests {
		at = append(at, g+" on "+where[g])
	}
	s.usage.sample(s.bed, after)
	s.mu.Lock()
	n, c := s.migrations, s.completed
	s.mu.Unlock()
	s.logf("invariants hold after %s: %s; %d migrations so far, %d completed (%.0fs of checks)", after, strings.Join(at, ", "), n, c, time.Since(t0).Seconds())
	return true
}

// settle waits until no migrator has a migration under way, neither
// ferryd has a job in flight, and libvirt shows each guest at rest: ""
// once so, else what was still not. A paused post-copy awaiting its
// recovery is a job in flight: it is waited for. Once the migrators and
// both ferryds are done, libvirt gets 30 s more to agree.
func (s *soak) settle(ctx context.Context, guests []string) string {
	deadline := time.Now().Add(s.o.settleTimeout)
	var quiet time.Time
	var why []string
	for ctx.Err() == nil {
		why = why[:0]
		if !s.gate.idle() {
			why = append(why, "migrations under way: "+strings.Join(s.inFlight(), "; "))
		}
		for _, n := range nodes {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			jobs, err := s.ferryd(n).Jobs(rctx, false)
			cancel()
			if err != nil {
				why = append(why, fmt.Sprintf("ferryd on %s: %v", n, err))
				continue
			}
			for _, j := range jobs.Jobs {
				why = append(why, fmt.Sprintf("ferryd on %s has a job in flight: %s", n, jobText(j, nil)))
			}
		}
		if len(why) == 0 {
			if quiet.IsZero() {
				quiet = time.Now()
			}
			for _, g := range guests {
				p, err := readPlacement(s.bed, g)
				switch {
				case err != nil:
					why = append(why, err.Error())
				case p.wrong() != "":
					why = append(why, g+": "+p.wrong())
				}
			}
			if len(why) == 0 {
				return ""
			}
			if time.Since(quiet) > 30*time.Second {
				// What libvirt still shows is for the checks to judge.
				return ""
			}
		} else {
			quiet = time.Time{}
		}
		if time.Now().After(deadline) {
			return strings.Join(why, "; ")
		}
		sleepCtx(ctx, time.Second)
	}
	return "interrupted"
}

// checkMemory has each guest's own check of all its memory pass twice
// more, where it runs now, with no failure ever on any node.
func (s *soak) checkMemory(ctx context.Context, guests []string, after string) {
	const within = 45 * time.Second
	base := map[string]int{}
	for deadline := time.Now().Add(within); ; {
		var still []string
		for _, g := range guests {
			ok, bad, err := s.bed.GuestVerified(g)
			if err != nil || bad != "" {
				s.violate(fmt.Sprintf("after %s %s's memory check: %s", after, g, badText(bad, err)), s.detail(g)...)
				return
			}
			if _, seen := base[g]; !seen {
				base[g] = ok
			}
			if ok < base[g]+2 {
				still = append(still, g)
			}
		}
		if len(still) == 0 {
			return
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 500*time.Millisecond) {
			if ctx.Err() == nil {
				s.violate(fmt.Sprintf("after %s the memory check of %s did not pass twice in %v: the guest is stuck or gone", after, strings.Join(still, ", "), within), s.details(still)...)
			}
			return
		}
	}
}

func badText(bad string, err error) string {
	if err != nil {
		return err.Error()
	}
	return bad
}

// checkRecords compares both ferryds' records with libvirt, for as long
// as ferryd may take to see what libvirt did (15 s).
func (s *soak) checkRecords(ctx context.Context, guests []string, after string) {
	var v []string
	for deadline := time.Now().Add(15 * time.Second); ; {
		v = v[:0]
		for _, g := range guests {
			p, err := readPlacement(s.bed, g)
			if err != nil {
				v = append(v, err.Error())
				continue
			}
			for _, w := range s.recordViolations(ctx, g, p) {
				v = append(v, g+": "+w)
			}
		}
		if len(v) == 0 || time.Now().After(deadline) || !sleepCtx(ctx, time.Second) {
			break
		}
	}
	if len(v) > 0 && ctx.Err() == nil {
		s.violateRecords(fmt.Sprintf("after %s Ferry's records disagree with libvirt:\n  - %s", after, strings.Join(v, "\n  - ")), s.details(guests)...)
	}
}

// recordViolations lists how both ferryds' records of the guest disagree
// with libvirt, which runs it whole on p.home(): its domain list on each
// node, and the records of its latest migration on both.
func (s *soak) recordViolations(ctx context.Context, g string, p placement) []string {
	var v []string
	add := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }
	home := p.home()
	for _, n := range nodes {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := s.ferryd(n).Domains(rctx, false)
		cancel()
		if err != nil {
			add("ferryd on %s cannot list its domains: %v", n, err)
			continue
		}
		var d *api.Domain
		for i := range resp.Domains {
			if resp.Domains[i].Name == g {
				d = &resp.Domains[i]
			}
		}
		switch {
		case n == home && d == nil:
			add("libvirt runs it on %s (%s), and ferryd there does not list it", n, p.on(n))
		case n == home && !d.HoldsGuest:
			add("libvirt runs it on %s (%s), and ferryd there says its copy does not hold the guest (%s/%s, job %s %s)", n, p.on(n), d.State, d.Reason, d.JobRole, d.JobPhase)
		case n != home && d != nil && d.HoldsGuest:
			add("ferryd on %s says its copy holds the guest (%s/%s), and libvirt there shows %s", n, d.State, d.Reason, p.on(n))
		}
	}
	s.mu.Lock()
	var m *migration
	var ferrydNow, libvirtdNow map[string]int
	if last := s.last[g]; last != nil {
		c := *last
		m = &c
		ferrydNow, libvirtdNow = copyEpochs(s.ferrydEpoch), copyEpochs(s.libvirtdEpoch)
	}
	s.mu.Unlock()
	if m == nil {
		return v
	}
	// A ferryd restarted since the migration began may have lost its
	// record; one that ran throughout must have it.
	keptS := ferrydNow[m.From] == m.FerrydEpoch[m.From]
	keptD := ferrydNow[m.To] == m.FerrydEpoch[m.To]
	libvirtdRestartedD := libvirtdNow[m.To] != m.LibvirtdEpoch[m.To]
	// Searched in each node's whole history, not its latest job of the
	// guest: an attempt refused since (ferryd records a prepare refused
	// by the target as a failed job) comes after it.
	js, haveS, errS := s.findJob(ctx, m.From, g, m.mine)
	jd, haveD, errD := s.findJob(ctx, m.To, g, func(j api.Job) bool {
		return j.Role == api.RoleTarget && !j.StartTime.Before(m.Start.Add(-2*time.Second))
	})
	if errS != nil || errD != nil {
		add("reading the ferryds' jobs: %v", errors.Join(errS, errD))
		return v
	}
	if !haveS && keptS {
		add("ferryd on %s, running since %s began, has no record of it (its jobs of the guest: %s)", m.From, m, s.jobsText(ctx, m.From, g))
	}
	sp, dp := js.Phase, jd.Phase
	switch home {
	case m.To:
		if haveS && sp != api.PhaseCompleted && sp != api.PhaseLost {
			add("libvirt shows %s done (the guest runs on %s alone), and the source's record says %s%s", m, m.To, sp, reasonText(js))
		}
		switch {
		case haveD && dp == api.PhaseLost && libvirtdRestartedD:
		case haveD && dp != api.PhaseCompleted:
			add("libvirt shows %s done, and the target's record says %s%s", m, dp, reasonText(jd))
		case !haveD && keptD:
			add("libvirt shows %s done, and ferryd on %s, running throughout, has no record of it (its jobs of the guest: %s)", m, m.To, s.jobsText(ctx, m.To, g))
		}
		// After a pre-copy libvirt keeps the completed job's figures on
		// the target; Ferry's record there must be exactly them.
		if haveD && dp == api.PhaseCompleted && keptD && !libvirtdRestartedD && m.LaterAttempts == 0 && jd.Mode != api.ModePostCopy && (!haveS || js.Mode != api.ModePostCopy) && !m.Plan.PostCopy {
			st := p.on(m.To).Stats
			switch {
			case st == nil:
				add("libvirt keeps no completed-job figures on %s after the pre-copy %s", m.To, m)
			case st.Type != jobCompleted:
				add("libvirt's completed job on %s is of type %d, not completed, after %s", m.To, st.Type, m)
			case jd.DowntimeMs != st.DowntimeMs || jd.DataTotalBytes != st.DataTotal || jd.DataProcessedBytes != st.Processed:
				add("the target's figures of %s (downtime %d ms, data total %d, processed %d) are not libvirt's (downtime %d ms, total %d, processed %d)",
					m, jd.DowntimeMs, jd.DataTotalBytes, jd.DataProcessedBytes, st.DowntimeMs, st.DataTotal, st.Processed)
			}
		}
	case m.From:
		if haveS && (sp == api.PhaseCompleted || sp == api.PhasePostCopyFailed) {
			add("the guest runs on %s alone, so %s did not happen, and the source's record says %s%s", m.From, m, sp, reasonText(js))
		}
		if haveD && (dp == api.PhaseCompleted || dp == api.PhasePostCopyFailed) {
			add("the guest runs on %s alone, so %s did not happen, and the target's record says %s%s", m.From, m, dp, reasonText(jd))
		}
	}
	if seen, haveSeen := m.Job, m.HaveJob; haveSeen && seen.Phase.Finished() && haveS && seen.Phase != sp && sp != api.PhaseLost {
		add("the source's record of %s said %s when it ended and says %s now", m, seen.Phase, sp)
	}
	return v
}

// findJob is the node's earliest job of the guest that match says is
// the one, among those in flight and those its ferryd keeps.
func (s *soak) findJob(ctx context.Context, node, guest string, match func(api.Job) bool) (api.Job, bool, error) {
	jobs, err := s.guestJobs(ctx, node, guest)
	for _, j := range jobs {
		if match(j) {
			return j, true, nil
		}
	}
	return api.Job{}, false, err
}

// guestJobs are the node's jobs of the guest, oldest first.
func (s *soak) guestJobs(ctx context.Context, node, guest string) ([]api.Job, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all, err := s.ferryd(node).Jobs(rctx, true)
	if err != nil {
		return nil, fmt.Errorf("ferryd on %s: %w", node, err)
	}
	var out []api.Job
	for _, j := range all.Jobs {
		if j.Domain == guest {
			out = append(out, j)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].StartTime.Before(out[b].StartTime) })
	return out, nil
}

// jobsText lists the node's last few jobs of the guest, for a report.
func (s *soak) jobsText(ctx context.Context, node, guest string) string {
	jobs, err := s.guestJobs(ctx, node, guest)
	if err != nil {
		return err.Error()
	}
	if len(jobs) == 0 {
		return "none"
	}
	var out []string
	for _, j := range jobs[max(0, len(jobs)-3):] {
		out = append(out, jobText(j, nil))
	}
	return strings.Join(out, "; ")
}

// violate records a broken invariant and ends the run.
func (s *soak) violate(what string, detail ...string) {
	s.note(what, detail)
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.stop(errors.New("an invariant was broken"))
}

// violateRecords records a disagreement between Ferry's records and
// libvirt, which ends the run unless --keep-going: then the guests,
// still each on one node and whole, go on migrating, and the report
// lists it at the end.
func (s *soak) violateRecords(what string, detail ...string) {
	if !s.o.keepGoing {
		s.violate(what, detail...)
		return
	}
	s.note(what, detail)
}

func (s *soak) note(what string, detail []string) {
	s.mu.Lock()
	msg := fmt.Sprintf("[+%s] %s", clock(time.Since(s.start)), what)
	if len(detail) > 0 {
		msg += "\n" + strings.Join(detail, "\n")
	}
	s.violations = append(s.violations, msg)
	s.mu.Unlock()
	s.logf("VIOLATION: %s", what)
}

// failed says a violation has stopped the run.
func (s *soak) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// detail is what libvirt and both ferryds say of a guest, for a report.
func (s *soak) detail(g string) []string {
	p, err := readPlacement(s.bed, g)
	note := ""
	if err != nil {
		note = " (" + err.Error() + ")"
	}
	out := []string{fmt.Sprintf("    %s: libvirt: %s%s", g, p, note)}
	for _, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		j, err := s.ferryd(n).Job(ctx, g)
		cancel()
		out = append(out, fmt.Sprintf("    %s: ferryd on %s, latest job: %s", g, n, jobText(j, err)))
		for _, e := range j.Events[max(0, len(j.Events)-8):] {
			out = append(out, fmt.Sprintf("        %s %s: %s", e.Time.Format("15:04:05.000"), e.Kind, e.Detail))
		}
	}
	ok, bad, err := s.bed.GuestVerified(g)
	out = append(out, fmt.Sprintf("    %s: its memory check passed %d times; first failure: %q%s", g, ok, bad, errText(err)))
	s.mu.Lock()
	m := s.last[g]
	s.mu.Unlock()
	if m != nil {
		out = append(out, fmt.Sprintf("    %s: its latest migration: %s, begun at %s", g, m, m.Start.Format("15:04:05.000")))
		if m.ID != "" {
			for _, n := range nodes {
				for _, l := range logLines(filepath.Join(s.bed.Node(n).Dir, "ferryd.log"), m.ID, 12) {
					out = append(out, fmt.Sprintf("      ferryd.log on %s: %s", n, l))
				}
			}
		}
	}
	return out
}

// logLines are the last most lines of a log that mention text, each cut
// to a readable length.
func logLines(path, text string, most int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			if len(l) > 400 {
				l = l[:400] + "..."
			}
			out = append(out, l)
		}
	}
	return out[max(0, len(out)-most):]
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func (s *soak) details(guests []string) []string {
	gs := append([]string(nil), guests...)
	sort.Strings(gs)
	var out []string
	for _, g := range gs {
		out = append(out, s.detail(g)...)
	}
	return out
}
