package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/units"
)

// emit prints v as the chosen document format, or calls tab for table and
// wide (with wide set).
func emit(g *globals, v any, tab func(wide bool)) error {
	switch g.output {
	case "json":
		return printJSON(g.out, v)
	case "yaml":
		return printYAML(g.out, v)
	}
	tab(g.output == "wide")
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printYAML goes through the JSON encoding so that YAML keys are the JSON
// field names, the stable contract.
func printYAML(w io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func rate(b uint64) string { return units.IEC(b) + "/s" }

func etaString(s *float64) string {
	if s == nil || math.IsInf(*s, 0) || math.IsNaN(*s) {
		return "-"
	}
	return (time.Duration(*s * float64(time.Second))).Round(time.Second).String()
}

func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printJobs(w io.Writer, jobs []api.Job, wide bool) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "no migration jobs")
		return
	}
	tw := table(w)
	head := "DOMAIN\tROLE\tPHASE\tMODE\tITER\tPROGRESS\tREMAINING\tDIRTY\tTRANSFER\tCONVERGENCE\tETA\tSTARTED"
	if wide {
		head += "\tVMI\tSOCKET\tUUID\tCLASS\tREASON"
	}
	fmt.Fprintln(tw, head)
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.0f%%\t%s\t%s\t%s\t%s\t%s\t%s", clean(j.Domain), j.Role, j.Phase, j.Mode, j.Iteration,
			j.ProgressPercent, units.IEC(j.DataRemainingBytes), rate(j.DirtyRateBytesPerSecond), rate(j.TransferRateBytesPerSecond),
			j.Convergence, etaString(j.EtaSeconds), since(j.StartTime))
		if wide {
			vmi := "-"
			if j.Namespace != "" {
				vmi = j.Namespace + "/" + j.Name
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s", clean(vmi), clean(j.Socket), dash(clean(j.UUID)), dash(clean(j.FailureKind())), dash(clean(j.FailureReason)))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func printJob(w io.Writer, j api.Job) {
	tw := table(w)
	kv := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s:\t%s\n", clean(k), clean(fmt.Sprintf(f, a...))) }
	kv("Domain", "%s (%s)", j.Domain, j.UUID)
	if j.Namespace != "" && j.VMI == nil {
		kv("VMI", "%s/%s (not known to the API server, or no API configured)", j.Namespace, j.Name)
	}
	kv("Node", "%s, %s side, libvirt %s", j.Node, j.Role, j.Socket)
	if j.PeerNode != "" {
		kv("Peer node", "%s (%s), as its proxy certificate names it", j.PeerNode, peerRole(j.Role))
	}
	if v := j.VMI; v != nil {
		kv("VMI", "%s/%s uid %s, phase %s, node %s", v.Namespace, v.Name, v.UID, dash(v.Phase), dash(v.NodeName))
		if v.EvictionRequested || v.EvacuationNodeName != "" {
			kv("Eviction", "requested=%v, evacuating node %s", v.EvictionRequested, dash(v.EvacuationNodeName))
		}
		if ms := v.MigrationState; ms != nil {
			kv("KubeVirt migration", "%s -> %s (pods %s -> %s), uid %s, mode %s, abort requested %v %s",
				dash(ms.SourceNode), dash(ms.TargetNode), dash(ms.SourcePod), dash(ms.TargetPod), dash(ms.MigrationUID), dash(ms.Mode), ms.AbortRequested, dash(ms.AbortStatus))
		}
		if v.Irrecoverable {
			kv("VMI marked", "irrecoverable (label ferry-vm.io/migration-irrecoverable)")
		}
	}
	kv("Phase", "%s", j.Phase)
	if rc := j.Recovery; rc != nil {
		kv("Post-copy recovery", "%s", recoveryString(j, time.Now()))
	}
	if j.FailureReason != "" {
		kv("Failure", "%s", j.FailureReason)
	}
	if j.FailureClass != "" {
		kv("Failure class", "%s (%s)", j.FailureKind(), strings.Join(j.FailureEvidence, "; "))
	}
	if p := j.Policy; p != nil {
		for _, st := range p.Steps {
			verb := "advised"
			if st.Applied {
				verb = "applied"
			}
			kv("Policy ("+p.Mode+")", "pass %d: %s %s: %s", st.Iteration, verb, st.Action, st.Reason)
		}
	}
	kv("Mode", "%s", j.Mode)
	kv("Domain state", "%s", dash(j.DomainState))
	kv("Started", "%s (%s)", j.StartTime.Format(time.RFC3339), since(j.StartTime))
	if j.EndTime != nil {
		kv("Ended", "%s after %s", j.EndTime.Format(time.RFC3339), j.EndTime.Sub(j.StartTime).Round(time.Millisecond))
	}
	if j.Role == api.RoleSource {
		kv("Progress", "%.1f%%: %s sent, %s remaining (guest memory and disks: %s; pages dirtied again are sent again)",
			j.ProgressPercent, units.IEC(j.DataProcessedBytes), units.IEC(j.DataRemainingBytes), units.IEC(j.DataTotalBytes))
		kv("Rates", "dirty %s, transfer %s", rate(j.DirtyRateBytesPerSecond), rate(j.TransferRateBytesPerSecond))
		kv("Iteration", "%s", passString(j))
		kv("Convergence", "%s %s", j.Convergence, paren(j.ConvergenceReason))
		kv("ETA", "%s", etaString(j.EtaSeconds))
		kv("Post-copy requests", "%d", j.PostCopyRequests)
		if j.AutoConvergeThrottle > 0 {
			kv("Auto-converge throttle", "%d%%", j.AutoConvergeThrottle)
		}
	} else {
		kv("Statistics", "libvirt keeps job statistics on the source only; this side is tracked from events and states")
		if j.DataProcessedBytes > 0 {
			kv("Final figures", "%s sent in %d iterations over %s, downtime %d ms (libvirt's completed-job statistics)",
				units.IEC(j.DataProcessedBytes), j.Iteration, time.Duration(j.ElapsedMs)*time.Millisecond, j.DowntimeMs)
		}
	}
	if q := j.QEMU; q != nil && q.PID == 0 && q.Error != "" {
		kv("QEMU CPU", "unknown: %s", q.Error)
	} else if q != nil {
		kv("QEMU CPU", "pid %d: %.0f%% of a core now, %.1fs used, throttled %.1fs (%.0f%% of periods%s)", q.PID, q.CPUPercent, q.CPUUsageSeconds, q.ThrottledSeconds, q.ThrottledPercentPeriods, inCgroup(q.ThrottledCgroup))
	}
	tw.Flush()
	if len(j.Iterations) > 0 {
		fmt.Fprintln(w, "\nIterations:")
		tw = table(w)
		fmt.Fprintln(tw, "  #\tSTART\tDURATION\tLEFT DIRTY\tDIRTY RATE\tTRANSFER")
		for _, it := range j.Iterations {
			dur := "-"
			if it.End != nil {
				dur = it.End.Sub(it.Start).Round(time.Millisecond).String()
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", it.Number, it.Start.Format("15:04:05.000"), dur,
				units.IEC(it.MemoryRemainingBytes), rate(it.DirtyRateBytesPerSecond), rate(it.TransferRateBytesPerSecond))
		}
		tw.Flush()
	}
	if len(j.Events) > 0 {
		fmt.Fprintln(w, "\nEvents:")
		for _, e := range j.Events {
			fmt.Fprintf(w, "  %s  %-12s %s\n", e.Time.Format("15:04:05.000"), clean(e.Kind), clean(e.Detail))
		}
	}
}

func peerRole(r api.Role) string {
	if r == api.RoleTarget {
		return "the source, which prepared it"
	}
	return "the target, which answered"
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

func printDomains(w io.Writer, node string, doms []api.Domain, sockets []api.SocketStatus, wide bool) {
	for _, s := range sockets {
		state := "up"
		if !s.Up {
			state = "DOWN: " + s.LastError
		}
		if !s.UnresponsiveSince.IsZero() {
			state = fmt.Sprintf("HUNG: nothing from libvirt for %s (since %s): %s", time.Since(s.UnresponsiveSince).Round(time.Second),
				s.UnresponsiveSince.Local().Format("15:04:05"), s.LastError)
		}
		versions := dash(clean(s.LibvirtVersion))
		if s.QEMUVersion != "" {
			versions += ", QEMU " + clean(s.QEMUVersion)
		}
		fmt.Fprintf(w, "libvirt %s (%s) %s\n", clean(s.Socket), versions, clean(state))
	}
	if len(doms) == 0 {
		fmt.Fprintf(w, "no running domains on node %s\n", clean(node))
		return
	}
	tw := table(w)
	head := "DOMAIN\tSTATE\tREASON\tMIGRATABLE\tLAST JOB\tATTENTION"
	if wide {
		head += "\tVMI\tSOCKET\tUUID"
	}
	fmt.Fprintln(tw, head)
	for _, d := range doms {
		job := "-"
		if d.JobPhase != "" {
			job = fmt.Sprintf("%s %s", d.JobRole, d.JobPhase)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s", clean(d.Name), clean(d.State), clean(d.Reason), clean(migratable(d)), clean(job), dash(clean(d.Attention)))
		if wide {
			vmi := "-"
			if d.Namespace != "" {
				vmi = d.Namespace + "/" + d.VMI
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s", clean(vmi), clean(d.Socket), dash(clean(d.UUID)))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// progressLine renders one job as a single line with a progress bar.
func progressLine(j api.Job, width int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %-6s ", trunc(clean(j.Domain), 20), j.Role)
	if j.Role == api.RoleTarget {
		fmt.Fprintf(&b, "%-14s %s (statistics are on the source)", j.Mode, j.Phase)
		return b.String()
	}
	// The bar and its figure are the overall progress, which ferryd never
	// lets go down; the current pass, which starts over at each pass, is
	// shown apart from it.
	filled := int(j.ProgressPercent / 100 * float64(width))
	filled = max(0, min(width, filled))
	fmt.Fprintf(&b, "[%s%s] %3.0f%%  %-28s  left %9s  dirty %11s vs xfer %11s  %-8s %-10s ETA %s",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), j.ProgressPercent, passString(j),
		units.IEC(j.DataRemainingBytes), rate(j.DirtyRateBytesPerSecond), rate(j.TransferRateBytesPerSecond),
		j.Mode, j.Convergence, etaString(j.EtaSeconds))
	return b.String()
}

// passString is the current pass over guest memory: "pass 4: 62% of 113.0 MiB".
func passString(j api.Job) string {
	if j.Iteration == 0 {
		return "starting"
	}
	if j.PassBytes == 0 {
		return fmt.Sprintf("pass %d", j.Iteration)
	}
	return fmt.Sprintf("pass %d: %.0f%% of %s", j.Iteration, j.PassPercent, units.IEC(j.PassBytes))
}

func summaryLine(j api.Job) string {
	d := "-"
	if j.EndTime != nil {
		d = j.EndTime.Sub(j.StartTime).Round(time.Millisecond).String()
	}
	s := fmt.Sprintf("%s %s: %s after %s", clean(j.Domain), j.Role, j.Phase, d)
	if j.PeerNode != "" {
		s += ", peer node " + clean(j.PeerNode)
	}
	if j.Role == api.RoleSource {
		s += fmt.Sprintf(", %d iterations, %s sent, mode %s, %d post-copy requests", j.Iteration, units.IEC(j.DataProcessedBytes), j.Mode, j.PostCopyRequests)
		if j.DowntimeMs > 0 {
			s += fmt.Sprintf(", downtime %d ms", j.DowntimeMs)
		}
	}
	if j.FailureReason != "" {
		s += "\n  reason: " + clean(j.FailureReason)
	}
	return s
}

// recoveryString says where a broken post-copy's recovery stands: while
// paused, how long until it is overdue (Ferry tries on after that).
func recoveryString(j api.Job, now time.Time) string {
	rc := j.Recovery
	s := fmt.Sprintf("%d attempts, %d resumed", rc.Attempts, rc.Resumed)
	if j.Phase == api.PhasePostCopyPaused {
		if left := rc.Until.Sub(now).Round(time.Second); left > 0 && !rc.Overdue {
			s = fmt.Sprintf("paused on both nodes; overdue in %s (at %s), tried on until resumed or given up; %s",
				left, rc.Until.Local().Format("15:04:05"), s)
		} else {
			s = fmt.Sprintf("paused on both nodes, OVERDUE since %s; tried on until resumed or given up; %s",
				rc.Until.Local().Format("15:04:05"), s)
		}
		if j.Role == api.RoleSource {
			s += " (ferryctl recover / give-up)"
		} else {
			s += " (ferryctl recover on the source; give-up here ends this node's job)"
		}
	}
	if rc.LastError != "" {
		s += "; last: " + rc.LastError
	}
	return s
}

// trunc counts runes, not bytes: a cut through a rune would print
// invalid UTF-8.
func trunc(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// inCgroup names the cgroup the throttled figures are of, when any.
func inCgroup(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path
}

// migratable is the MIGRATABLE column: yes, no and what blocks first, or
// "?" where the check could not be made (-o json says why).
func migratable(d api.Domain) string {
	switch {
	case d.Migratable == nil && d.CheckError != "":
		return "?"
	case d.Migratable == nil:
		return "-"
	case *d.Migratable:
		return "yes"
	case d.BlockedBy != "":
		return "no: " + d.BlockedBy
	}
	return "no"
}
