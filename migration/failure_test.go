package migration

import (
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/api"
)

// The reasons are as the test bed's failures word them (libvirt 11.3,
// QEMU 10.0, Ferry's driver and proxy).
func TestClassifyFailure(t *testing.T) {
	stalled := func(j *api.Job) { j.Convergence, j.ConvergenceReason = api.VerdictStalled, "does not shrink" }
	policyAbort := func(trigger string) *api.PolicyInfo {
		return &api.PolicyInfo{Mode: "act", Steps: []api.PolicyStep{{Action: "abort", Trigger: trigger, Applied: true}}}
	}
	cases := []struct {
		name     string
		job      api.Job
		edit     func(*api.Job)
		plane    api.FailurePlane
		class    api.FailureClass
		evidence string
	}{
		{name: "link cut", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "migration failed: libvirt migrate (/run/libvirt/libvirt-sock): operation failed: job 'migration out' failed: Unable to read from socket: Connection reset by peer; proxy: memory stream broke: write tcp 10.77.0.1:34216->10.77.0.2:9475: write: network is unreachable; migration link: fa went down at 03:41:22.979"},
			plane: api.PlaneData, class: api.ClassLinkDown, evidence: "went down"},
		{name: "connections reset", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "migration failed: libvirt migrate (/run/libvirt/libvirt-sock): operation failed: job 'migration out' failed: Unable to read from socket: Connection reset by peer; proxy: memory stream broke: read tcp 10.77.0.1:40112->10.77.0.2:9475: read: connection reset by peer"},
			plane: api.PlaneData, class: api.ClassConnectionReset, evidence: "Connection reset"},
		{name: "target ferryd down", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: dial tcp 10.77.0.2:9475: connect: connection refused"},
			plane: api.PlaneControl, class: api.ClassTargetUnreachable, evidence: "connection refused"},
		{name: "wrong certificate", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: remote error: tls: bad certificate"},
			plane: api.PlaneControl, class: api.ClassAuthFailed, evidence: "tls: bad certificate"},
		{name: "target refuses", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: refused (domain_exists): default_twin already runs on this node"},
			plane: api.PlaneControl, class: api.ClassTargetRefused, evidence: "already runs"},
		{name: "source QEMU killed", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, DomainState: "shutoff/failed", FailureReason: "the domain stopped during the migration (shutoff/failed)"},
			plane: api.PlaneGuest, class: api.ClassGuestStopped, evidence: "shutoff/failed"},
		{name: "target side of a broken stream", job: api.Job{Role: api.RoleTarget, Phase: api.PhaseFailed, DomainState: "shutoff/failed", FailureReason: "incoming migration failed: the target domain was stopped (shutoff/failed); the source aborted or the migration stream broke"},
			plane: api.PlaneData, class: api.ClassIncomingStreamEnded, evidence: "source's job says why"},
		{name: "operator abort", job: api.Job{Role: api.RoleSource, Phase: api.PhaseAborted, AbortStatus: api.AbortSucceeded, AbortedBy: AbortByOperator, FailureReason: "aborted on request through Ferry"},
			edit: stalled, plane: api.PlaneOperator, class: api.ClassAbortedByOperator, evidence: "aborted on request"},
		{name: "policy abort of a stalled guest", job: api.Job{Role: api.RoleSource, Phase: api.PhaseAborted, AbortStatus: api.AbortSucceeded, AbortedBy: AbortByPolicy, FailureReason: "aborted by the convergence policy: dirty 47.3 MiB/s vs transfer 48.8 MiB/s; 20s of a 5m0s backstop used", Policy: policyAbort("stalled")},
			edit: stalled, plane: api.PlaneGuest, class: api.ClassNotConverging, evidence: "verdict Stalled"},
		{name: "policy abort at the backstop of a slow link", job: api.Job{Role: api.RoleSource, Phase: api.PhaseAborted, AbortStatus: api.AbortSucceeded, AbortedBy: AbortByPolicy, FailureReason: "aborted by the convergence policy: ...; 5m1s of a 5m0s backstop used", Policy: policyAbort("deadline"), Convergence: api.VerdictConverging},
			plane: api.PlaneData, class: api.ClassDeadlineExceeded, evidence: "trigger deadline"},
		{name: "abort by someone else", job: api.Job{Role: api.RoleSource, Phase: api.PhaseAborted, DomainState: "running/migration-canceled", FailureReason: "libvirt's job ended cancelled: operation aborted: migration out job: canceled by client"},
			edit: stalled, plane: api.PlaneOperator, class: api.ClassAbortedExternally, evidence: "canceled by client"},
		{name: "a target's refusal names a certificate", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: target 10.77.0.2:9475 refused (domain_exists): certificate deadline tls: x509"},
			plane: api.PlaneControl, class: api.ClassTargetRefused, evidence: "refused (domain_exists)"},
		{name: "a target refusing an identity", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: target 10.77.0.2:9475 refused (no_node_identity): this node requires peers' certificates to name their node"},
			plane: api.PlaneControl, class: api.ClassAuthFailed, evidence: "no_node_identity"},
		{name: "target libvirtd down", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: target 10.77.0.2:9475 refused (libvirt_unavailable): this node's libvirt is not connected"},
			plane: api.PlaneControl, class: api.ClassTargetUnreachable, evidence: "its libvirtd did not"},
		{name: "another node at the target's address", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: target proxy 10.77.0.2:9475 is node c, not node b, which the migration asked for"},
			plane: api.PlaneControl, class: api.ClassAuthFailed, evidence: "not node b, which"},
		{name: "a peer's uncoded refusal naming another node", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: target 10.77.0.2:9475 refused (unrecognised): target proxy 10.77.0.2:9475 is node c, not node b, which the migration asked for"},
			plane: api.PlaneControl, class: api.ClassTargetRefused, evidence: "refused (unrecognised)"},
		{name: "a prepare that timed out", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "preparing the migration on the target: control answer from 10.77.0.2:9475: context deadline exceeded"},
			plane: api.PlaneControl, class: api.ClassTargetUnreachable, evidence: "deadline exceeded"},
		{name: "another proxy at the target's address", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, DomainState: "running/booted", FailureReason: "migration failed: Unable to read from socket: Connection reset by peer; proxy: memory stream: target proxy 10.77.0.2:9475 is node c, not the node b that prepared the migration"},
			plane: api.PlaneControl, class: api.ClassAuthFailed, evidence: "not the node b"},
		{name: "target ferryd gone mid-migration", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, DomainState: "running/migration canceled", FailureReason: "migration failed: operation failed: job 'migration out' failed: Channel error: Input/output error; proxy: memory stream broke: write: broken pipe",
			Proxy: &api.ProxyInfo{TargetLost: "nothing listens at its proxy's address any more (its ferryd is down)"}},
			plane: api.PlaneControl, class: api.ClassTargetUnreachable, evidence: "its ferryd is down"},
		{name: "a cut link outranks a target that looks gone", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, FailureReason: "migration failed: Channel error; migration link: migration link: veth0 went down at 10:00:00.000",
			Proxy: &api.ProxyInfo{TargetLost: "its proxy no longer knows the migration (its ferryd restarted)"}},
			plane: api.PlaneData, class: api.ClassLinkDown, evidence: "went down"},
		{name: "a peer's finish refusal naming a link", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, DomainState: "running/migration canceled", FailureReason: "migration failed: operation failed: job 'migration out' failed; the target did not finish it: target 10.77.0.2:9475 refused (unrecognised): ‹migration link: eth0 went down; tls: bad certificate; domain stopped›"},
			plane: api.PlaneControl, class: api.ClassLibvirtError, evidence: "refused (unrecognised): ‹…›"},
		{name: "a peer's stream refusal naming another node", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, DomainState: "running/migration canceled", FailureReason: "migration failed: operation failed: job 'migration out' failed",
			Proxy: &api.ProxyInfo{Errors: []string{"memory stream: target proxy refused the stream: ‹not the node b that prepared the migration; tls: nope›"}}},
			plane: api.PlaneControl, class: api.ClassTargetRefused, evidence: "refused the stream: ‹…›"},
		{name: "source QEMU crashed mid-stream", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, DomainState: "shutoff/crashed", FailureReason: "migration failed: Unable to read from monitor: Connection reset by peer"},
			plane: api.PlaneGuest, class: api.ClassGuestStopped, evidence: "shutoff/crashed"},
		{name: "policy abort of a CPU-starved source", job: api.Job{Role: api.RoleSource, Phase: api.PhaseAborted, AbortStatus: api.AbortSucceeded, AbortedBy: AbortByPolicy, FailureReason: "aborted by the convergence policy: ...", Policy: policyAbort("stalled"),
			QEMU: &api.QEMUFigures{ThrottledPercentPeriods: 64}},
			edit: stalled, plane: api.PlaneGuest, class: api.ClassSourceCPUStarved, evidence: "throttled by its cgroup in 64 %"},
		{name: "a quota that only trims bursts", job: api.Job{Role: api.RoleSource, Phase: api.PhaseAborted, AbortStatus: api.AbortSucceeded, AbortedBy: AbortByPolicy, FailureReason: "aborted by the convergence policy: ...", Policy: policyAbort("stalled"),
			QEMU: &api.QEMUFigures{ThrottledPercentPeriods: 35}},
			edit: stalled, plane: api.PlaneGuest, class: api.ClassNotConverging, evidence: "verdict Stalled"},
		{name: "deadline on a stalled guest", job: api.Job{Role: api.RoleSource, Phase: api.PhaseAborted, FailureReason: "migration failed: the migration deadline (5m0s) passed; libvirt's job was aborted"},
			edit: stalled, plane: api.PlaneGuest, class: api.ClassDeadlineExceeded, evidence: "deadline"},
		{name: "post-copy failed", job: api.Job{Role: api.RoleSource, Phase: api.PhasePostCopyFailed, Mode: api.ModePostCopy, DomainState: "paused/post-copy-failed", FailureReason: "post-copy failed: source paused (paused/post-copy-failed)"},
			plane: api.PlaneData, class: api.ClassPostCopyFailed, evidence: "paused/post-copy-failed"},
		{name: "split brain", job: api.Job{Role: api.RoleSource, Phase: api.PhasePostCopyFailed, Mode: api.ModePostCopy, DomainState: "running/post-copy", FailureReason: "post-copy failed: the source resumed its vCPUs"},
			plane: api.PlaneGuest, class: api.ClassSplitBrain, evidence: "runs its own vCPUs"},
		{name: "anything else", job: api.Job{Role: api.RoleSource, Phase: api.PhaseFailed, DomainState: "running/booted", FailureReason: "migration job ended without completing; libvirt kept no statistics of why"},
			plane: api.PlaneControl, class: api.ClassLibvirtError, evidence: "libvirt kept no statistics"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := c.job
			if c.edit != nil {
				c.edit(&j)
			}
			f := ClassifyFailure(j)
			if f == nil || f.Plane != c.plane || f.Class != c.class {
				t.Fatalf("got %+v, want %s/%s", f, c.plane, c.class)
			}
			if ev := strings.Join(f.Evidence, "; "); !strings.Contains(ev, c.evidence) {
				t.Fatalf("evidence %q lacks %q", ev, c.evidence)
			}
		})
	}
	for _, p := range []api.Phase{api.PhaseCompleted, api.PhaseRunning, api.PhaseLost} {
		if f := ClassifyFailure(api.Job{Phase: p, FailureReason: "connection reset"}); f != nil {
			t.Errorf("%s job classified as %+v", p, f)
		}
	}
}
