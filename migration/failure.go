package migration

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/peertext"
)

// Failure is the class of a failed, aborted or post-copy-failed job with
// the facts that decided it.
type Failure struct {
	Plane    api.FailurePlane `json:"plane"`
	Class    api.FailureClass `json:"class"`
	Evidence []string         `json:"evidence"`
}

// starvedPercent of CFS periods throttled marks a QEMU whose cgroup quota,
// not the guest's dirtying alone, kept pre-copy from keeping up. QEMU's
// demand is bursty, so a quota well above its average use is still hit in
// many periods. Measured under TCG with a guest dirtying 24 MiB/s over a
// 48 MiB/s link: QEMU using ~13 % of a CPU on average was throttled in 35 %
// of the periods of a 30 % quota and in 87 % of a 15 % one, and migrated at
// the link's full rate both times; QEMUs held well below what they would
// use (a max-rate guest at 30 % and 50 %) were throttled in 99-100 %. The
// share alone does not prove the quota cost the migration anything, which
// is why the class also needs a not-converging verdict; half of the
// periods keeps out a quota that only trims bursts and keeps in any that
// holds QEMU below its need.
const starvedPercent = 50

// What the error texts of the layers below say, as libvirt, QEMU, Go's net
// and TLS stacks, and Ferry's own proxy and driver word them.
var (
	reTLS           = regexp.MustCompile(`(?i)\btls:|x509:|certificate|handshake`)
	reUnreachable   = regexp.MustCompile(`(?i)connection refused|no route to host|i/o timeout|host is down|dial tcp|connect: network is unreachable`)
	reLinkDown      = regexp.MustCompile(`(?i)migration link: .* went down|network is unreachable`)
	reReset         = regexp.MustCompile(`(?i)connection reset|connection abort|broken pipe|stream broke|unexpected EOF|Unable to read from socket|Channel error`)
	reWrongPeer     = regexp.MustCompile(`not the (node \S+|certificate) that prepared the migration|refused \(wrong_peer\)|not node \S+, which the migration asked for`)
	reRefused       = regexp.MustCompile(`(?i)target refused|refused the prepare|prepare refused|refused:`)
	reStreamRefused = regexp.MustCompile(`target proxy refused the stream`)
	// The driver words the target's own answer to a prepare this way (see
	// peer.ControlError); what follows is the peer's text, which must not
	// pick the class.
	rePrepareAnswer = regexp.MustCompile(`preparing the migration on the target: target \S+ (refused \(([a-z_]+)\)|answered)?`)
	reStopped       = regexp.MustCompile(`(?i)domain stopped|not running|crashed|shutoff/(crashed|failed|destroyed)`)
)

// ClassifyFailure decides the plane and class of a finished job from what
// the job holds: who asked for an abort, the verdict, the QEMU cgroup's
// throttling, the domain's state, and the errors the driver and libvirt
// gave. A finished job that did not fail has none.
func ClassifyFailure(j api.Job) *Failure {
	switch j.Phase {
	case api.PhaseFailed, api.PhaseAborted, api.PhasePostCopyFailed:
	default:
		return nil
	}
	f := &Failure{}
	note := func(format string, a ...any) { f.Evidence = append(f.Evidence, fmt.Sprintf(format, a...)) }
	set := func(p api.FailurePlane, c api.FailureClass) *Failure { f.Plane, f.Class = p, c; return f }
	reason := j.FailureReason
	if j.Proxy != nil && len(j.Proxy.Errors) > 0 {
		reason += "; " + strings.Join(j.Proxy.Errors, "; ")
	}
	// What a peer said (a refusal's text) stays in the failure reason for
	// people; this node's own account alone decides the class.
	reason = peertext.Strip(reason)
	notConverging := j.Convergence == api.VerdictStalled || j.Convergence == api.VerdictDiverging
	starved := j.QEMU != nil && j.QEMU.ThrottledPercentPeriods >= starvedPercent
	if notConverging {
		note("verdict %s: %s", j.Convergence, j.ConvergenceReason)
	}
	if starved {
		note("source QEMU throttled by its cgroup in %.0f %% of CPU periods (%d of them, %.1fs, in cgroup %s)",
			j.QEMU.ThrottledPercentPeriods, j.QEMU.ThrottledPeriods, j.QEMU.ThrottledSeconds, j.QEMU.ThrottledCgroup)
	}

	if j.Phase == api.PhasePostCopyFailed {
		note("domain state %s", j.DomainState)
		if j.Role == api.RoleSource && strings.HasPrefix(j.DomainState, "running/") {
			note("the source runs its own vCPUs again after the switch to post-copy")
			return set(api.PlaneGuest, api.ClassSplitBrain)
		}
		if m := firstMatch(reason, reLinkDown, reReset); m != "" {
			note("stream: %s", m)
		}
		return set(api.PlaneData, api.ClassPostCopyFailed)
	}

	// An abort that did not take effect (refused, or overtaken by the
	// migration's own failure) did not end the job: its evidence does.
	if j.AbortStatus == api.AbortSucceeded || j.AbortedBy != "" && j.AbortStatus != api.AbortFailed {
		switch j.AbortedBy {
		case AbortByPolicy:
			trigger := policyTrigger(j)
			note("aborted by the convergence policy (trigger %s)", trigger)
			switch {
			case trigger == "deadline" && notConverging:
				return set(api.PlaneGuest, api.ClassDeadlineExceeded)
			case trigger == "deadline":
				return set(api.PlaneData, api.ClassDeadlineExceeded)
			case (trigger == "stalled" || trigger == "diverging") && starved:
				return set(api.PlaneGuest, api.ClassSourceCPUStarved)
			case trigger == "stalled" || trigger == "diverging", trigger == "" && notConverging:
				return set(api.PlaneGuest, api.ClassNotConverging)
			}
			return set(api.PlaneOperator, api.ClassAbortedByPolicy)
		case AbortByDeadline:
			note("aborted at the deadline of the migration Ferry drives")
			if notConverging {
				return set(api.PlaneGuest, api.ClassDeadlineExceeded)
			}
			return set(api.PlaneData, api.ClassDeadlineExceeded)
		default:
			note("aborted on request through Ferry")
			return set(api.PlaneOperator, api.ClassAbortedByOperator)
		}
	}
	// Structured facts before any text: a source domain that stopped is
	// the guest's end, whatever error the stream reported on the way.
	if j.Role == api.RoleSource && strings.HasPrefix(j.DomainState, "shutoff/") {
		note("domain state %s: %s", j.DomainState, excerpt(reason))
		return set(api.PlaneGuest, api.ClassGuestStopped)
	}
	if j.Role == api.RoleTarget && strings.HasPrefix(reason, "incoming migration failed") {
		note("the incoming stream ended before the migration completed (%s); the source's job says why", j.DomainState)
		return set(api.PlaneData, api.ClassIncomingStreamEnded)
	}
	if strings.HasPrefix(reason, "preparing the migration on the target") {
		if m := rePrepareAnswer.FindStringSubmatch(reason); m != nil && m[1] != "" {
			code := m[2]
			note("the target answered the prepare: %s", excerpt(reason))
			switch code {
			case "no_node_identity", "invalid_node_identity", "wrong_peer":
				return set(api.PlaneControl, api.ClassAuthFailed)
			case "libvirt_unavailable":
				note("the target node's ferryd answered, its libvirtd did not")
				return set(api.PlaneControl, api.ClassTargetUnreachable)
			}
			return set(api.PlaneControl, api.ClassTargetRefused)
		}
		switch {
		case reWrongPeer.MatchString(reason):
			note("another proxy answered at the target's address: %s", firstMatch(reason, reWrongPeer))
			return set(api.PlaneControl, api.ClassAuthFailed)
		case reTLS.MatchString(reason):
			note("TLS: %s", firstMatch(reason, reTLS))
			return set(api.PlaneControl, api.ClassAuthFailed)
		case reUnreachable.MatchString(reason), strings.Contains(reason, "deadline exceeded"):
			note("target: %s", excerpt(reason))
			return set(api.PlaneControl, api.ClassTargetUnreachable)
		}
		note("the target's answer: %s", excerpt(reason))
		return set(api.PlaneControl, api.ClassTargetRefused)
	}
	if j.Phase == api.PhaseAborted && strings.Contains(reason, "deadline") {
		note("the migration outran its deadline: %s", excerpt(reason))
		if starved && notConverging {
			return set(api.PlaneGuest, api.ClassSourceCPUStarved)
		}
		if notConverging {
			return set(api.PlaneGuest, api.ClassDeadlineExceeded)
		}
		return set(api.PlaneData, api.ClassDeadlineExceeded)
	}
	if j.Phase == api.PhaseAborted {
		note("libvirt's job was cancelled by a client other than Ferry (e.g. KubeVirt or virsh domjobabort): %s", excerpt(reason))
		return set(api.PlaneOperator, api.ClassAbortedExternally)
	}
	if j.Role == api.RoleSource && j.Proxy != nil && j.Proxy.TargetLost != "" && !reLinkDown.MatchString(reason) {
		// The streams broke because the proxy at their far end went away;
		// what each stream said on the way is the consequence.
		note("the target, after the streams broke: %s", j.Proxy.TargetLost)
		return set(api.PlaneControl, api.ClassTargetUnreachable)
	}
	for _, r := range textRules {
		if m := firstMatch(reason, r.re); m != "" {
			note("%s: %s", r.what, m)
			return set(r.plane, r.class)
		}
	}
	note("libvirt: %s", excerpt(reason))
	return set(api.PlaneControl, api.ClassLibvirtError)
}

// textRules are tried in order on what the errors said, once the
// structured facts decided nothing: a link that went down explains the
// resets that followed, so it comes first.
var textRules = []struct {
	re    *regexp.Regexp
	what  string
	plane api.FailurePlane
	class api.FailureClass
}{
	{reWrongPeer, "another proxy answered at the target's address", api.PlaneControl, api.ClassAuthFailed},
	{reTLS, "TLS", api.PlaneControl, api.ClassAuthFailed},
	// The source proxy's own words for a stream the target would not
	// take; the reset that followed is its consequence.
	{reStreamRefused, "the target refused a stream", api.PlaneControl, api.ClassTargetRefused},
	{reLinkDown, "link", api.PlaneData, api.ClassLinkDown},
	{reReset, "stream", api.PlaneData, api.ClassConnectionReset},
	{reStopped, "the domain stopped", api.PlaneGuest, api.ClassGuestStopped},
	{reUnreachable, "target", api.PlaneControl, api.ClassTargetUnreachable},
	{reRefused, "the target refused", api.PlaneControl, api.ClassTargetRefused},
}

func firstMatch(s string, res ...*regexp.Regexp) string {
	for _, re := range res {
		if loc := re.FindStringIndex(s); loc != nil {
			return excerptAround(s, loc[0], loc[1])
		}
	}
	return ""
}

// excerpt keeps evidence short enough for an Event and a table.
func excerpt(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func excerptAround(s string, a, b int) string {
	const pad = 60
	lo, hi := max(0, a-pad), min(len(s), b+pad)
	out := strings.ToValidUTF8(s[lo:hi], "")
	if lo > 0 {
		out = "…" + out
	}
	if hi < len(s) {
		out += "…"
	}
	return out
}

// policyTrigger is what made the policy take its abort.
func policyTrigger(j api.Job) string {
	if j.Policy == nil {
		return ""
	}
	for i := len(j.Policy.Steps) - 1; i >= 0; i-- {
		if st := j.Policy.Steps[i]; st.Action == "abort" && st.Applied {
			return st.Trigger
		}
	}
	return ""
}
