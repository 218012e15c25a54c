package daemon

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/internal/units"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/kubevirt"
)

// kubeConfig finds the API server: --kubeconfig, else the in-cluster
// service account, else none (a plain libvirt host).
func kubeConfig(path string) (*rest.Config, string, error) {
	if path != "" {
		c, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, "", fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
		return c, "kubeconfig " + path, nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("in-cluster Kubernetes config: %w", err)
		}
		return c, "in-cluster service account", nil
	}
	return nil, "", nil
}

// setupKube builds the VMI watcher and the reporter when an API server is configured.
func (d *Daemon) setupKube() error {
	rc, from, err := kubeConfig(d.cfg.Kubeconfig)
	if err != nil || rc == nil {
		if rc == nil && err == nil {
			d.log.Info("no Kubernetes API configured: KubeVirt VMI reporting is off (plain libvirt host)")
		}
		return err
	}
	rc.UserAgent = "ferryd/" + d.cfg.Version
	// Marks must reach the API within seconds of a failure; fail fast and
	// retry. The VMI watches get a copy without this timeout (see
	// kubevirt.WatchConfig).
	rc.Timeout = 10 * time.Second
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	rep, err := kubevirt.NewReporter(kubevirt.ReporterConfig{Node: d.cfg.NodeName, StateDir: d.cfg.StateDir,
		Dynamic: dyn, Core: core, Log: d.log.Named("kubevirt"), PodsDir: d.podsDir()})
	if err != nil {
		return err
	}
	vmis, err := kubevirt.NewWatcher(rc, d.cfg.NodeName)
	if err != nil {
		return err
	}
	d.reporter, d.vmis, d.dyn = rep, vmis, dyn
	if d.cfg.PodNamespace != "" {
		d.pods = NewPodNodes(core, d.cfg.PodNamespace)
	}
	d.log.Info("KubeVirt VMI reporting on", zap.String("api", rc.Host), zap.String("from", from),
		zap.String("stateDir", d.cfg.StateDir))
	return nil
}

func (d *Daemon) runKube(ctx context.Context) {
	if d.reporter == nil {
		return
	}
	go d.reporter.Run(ctx)
	go func() {
		if !d.vmis.Run(ctx) && ctx.Err() == nil {
			d.log.Warn("VMI cache did not fill")
		}
	}()
}

// reportVMI turns a finished job of a KubeVirt domain into what the API
// server must learn: a post-copy failure marks the VMI irrecoverable; a
// guest left paused or an aborted migration gets an Event.
func (d *Daemon) reportVMI(j api.Job) {
	if d.reporter == nil || j.Namespace == "" {
		return
	}
	uid := d.jobVMIUID(j) // taken now, whatever the outcome, so none is kept
	m := kubevirt.Mark{Namespace: j.Namespace, Name: j.Name, Node: d.cfg.NodeName, Role: string(j.Role), Socket: j.Socket}
	if j.EndTime != nil {
		m.Detected = *j.EndTime
	}
	switch {
	case j.Phase == api.PhaseCompleted && j.Recovery != nil && j.Role == api.RoleSource:
		// Its recovery is over: the annotation goes.
		m.Kind, m.UID, m.EventType, m.EventReason = kubevirt.KindRecovering, uid, "Normal", "PostCopyRecovered"
		m.Recovery = &kubevirt.RecoveryState{State: kubevirt.RecoveryOver, Node: d.cfg.NodeName, Attempts: j.Recovery.Attempts, Resumed: j.Recovery.Resumed, Updated: m.Detected}
		m.Message = fmt.Sprintf("post-copy migration completed after Ferry resumed it %d time(s): the guest runs on the target", j.Recovery.Resumed)
	case j.Phase == api.PhasePostCopyFailed:
		m.Kind = kubevirt.KindIrrecoverable
		m.UID = uid
		m.Reason, m.RemainingBytes, m.PostCopyRequests = j.FailureReason, j.MemoryRemainingBytes, j.PostCopyRequests
		m.Message = fmt.Sprintf("%s: post-copy migration failed (%s), seen on node %s (%s side): %s; %s left to copy, %d post-copy page requests served",
			kubevirt.IrrecoverableMessage, failureClass(j), d.cfg.NodeName, j.Role, j.FailureReason, units.IEC(j.MemoryRemainingBytes), j.PostCopyRequests)
	case j.Phase == api.PhaseAborted && j.Role == api.RoleSource:
		m.Kind, m.EventType, m.EventReason = kubevirt.KindEvent, "Normal", "MigrationAborted"
		m.Message = fmt.Sprintf("migration aborted on node %s (%s): %s", d.cfg.NodeName, failureClass(j), j.FailureReason)
	case j.Phase == api.PhaseFailed && j.Role == api.RoleSource && strings.HasPrefix(j.DomainState, "paused/"):
		m.Kind, m.EventType, m.EventReason = kubevirt.KindEvent, "Warning", "MigrationFailedGuestPaused"
		m.Message = fmt.Sprintf("migration failed (%s) and left the guest paused (%s) on node %s: %s", failureClass(j), j.DomainState, d.cfg.NodeName, j.FailureReason)
	default:
		return
	}
	if m.Kind == kubevirt.KindIrrecoverable && j.Role == api.RoleTarget {
		// libvirt calls a target's post-copy failed when a migration API
		// call fails (its libvirtd restarted), though QEMU's stream may go
		// on and libvirt complete it by itself; the failed job holds the
		// domain, so QEMU cannot be asked through libvirt. The source asks
		// its QEMU and marks at once; the target marks only a guest still
		// split after a grace (the source's node may be gone).
		time.AfterFunc(targetMarkGrace, func() { d.markIfStillSplit(j, m) })
		return
	}
	d.report(m)
}

// targetMarkGrace is how long a target waits before it marks a VMI whose
// post-copy libvirt called failed: libvirt completes one whose QEMU
// stream went on within seconds of QEMU.
const targetMarkGrace = 30 * time.Second

// splitRecheck is how often a guest past its grace is looked at again
// while libvirt shows it in post-copy.
const splitRecheck = 2 * time.Second

// markIfStillSplit reports m unless the target's copy of j's guest now
// runs whole: libvirt completed the post-copy by itself. One libvirt shows
// in post-copy again (a restarted libvirtd takes QEMU's stream back as
// unattended) is looked at again until it completes or fails; one in
// post-copy because its source resumes it through this node's proxy is
// not libvirt's doing, and is marked: the mark comes off if the resume
// completes.
func (d *Daemon) markIfStillSplit(j api.Job, m kubevirt.Mark) {
	for give := time.Now().Add(24 * time.Hour); ; time.Sleep(splitRecheck) {
		state, reason, found := d.domainState(j.Socket, j.Domain)
		switch {
		case found && state == "running" && !strings.HasPrefix(reason, "post-copy"):
			d.log.Warn("not marking the VMI: libvirt called the post-copy failed, and then completed it", zap.String("vmi", j.Namespace+"/"+j.Name),
				zap.String("domain", j.Domain), zap.String("reason", reason))
			return
		case found && reason == "post-copy" && !d.resumedThroughProxy(j.IncomingID) && time.Now().Before(give):
			continue
		}
		d.report(m)
		return
	}
}

// resumedThroughProxy says whether this node's proxy relays the streams
// of a resume of incoming migration id.
func (d *Daemon) resumedThroughProxy(id string) bool {
	if d.Proxy == nil || id == "" {
		return false
	}
	for _, m := range d.Proxy.Registered() {
		if m.RecoveryOf == id {
			return true
		}
	}
	return false
}

// domainState is the tracker's last view of a domain's state and reason.
func (d *Daemon) domainState(socket, domain string) (state, reason string, found bool) {
	for _, dom := range d.Tracker.Domains() {
		if dom.Socket == socket && dom.Name == domain {
			return dom.State, dom.Reason, true
		}
	}
	return "", "", false
}

func (d *Daemon) report(m kubevirt.Mark) {
	if err := d.reporter.Report(m); err != nil {
		d.log.Error("VMI mark", zap.String("vmi", m.Namespace+"/"+m.Name), zap.Error(err))
	}
}

// postCopyRecovered takes the irrecoverable mark off a VMI whose post-copy
// completed after all: nobody should give up on a guest that runs.
func (d *Daemon) postCopyRecovered(r migration.RecoveredDomain) {
	if d.reporter == nil || r.Namespace == "" {
		return
	}
	m := kubevirt.Mark{Namespace: r.Namespace, Name: r.Name, Node: d.cfg.NodeName, Role: string(api.RoleTarget), Socket: r.Socket,
		Kind: kubevirt.KindRecovered, UID: d.domainUID(r.Socket, r.Domain), Detected: time.Now(),
		Message: fmt.Sprintf("the post-copy migration recorded failed completed after all: the guest runs on node %s as migrated; Ferry took its irrecoverable mark off", d.cfg.NodeName)}
	if err := d.reporter.Report(m); err != nil {
		d.log.Error("VMI unmark", zap.String("vmi", r.Namespace+"/"+r.Name), zap.Error(err))
	}
}

// reportRecovery shows a KubeVirt VMI where the recovery of its broken
// post-copy stands (an annotation, kept current) with an Event for each
// change: paused, each attempt, resumed.
func (d *Daemon) reportRecovery(j api.Job, what string) {
	if d.reporter == nil || j.Namespace == "" || j.Recovery == nil {
		return
	}
	rc := j.Recovery
	st := &kubevirt.RecoveryState{State: "paused", Node: d.cfg.NodeName, Until: rc.Until, Attempts: rc.Attempts, Resumed: rc.Resumed,
		LastError: rc.LastError, Updated: j.UpdateTime}
	m := kubevirt.Mark{Namespace: j.Namespace, Name: j.Name, Node: d.cfg.NodeName, Role: string(j.Role), Socket: j.Socket,
		Kind: kubevirt.KindRecovering, UID: d.domainUID(j.Socket, j.Domain), Detected: j.UpdateTime, Recovery: st, EventType: "Warning"}
	switch what {
	case migration.RecoveryPaused:
		m.EventReason = "PostCopyPaused"
		m.Message = fmt.Sprintf("post-copy migration broke; the guest is held paused on both nodes while Ferry on node %s resumes it, until %s (then it is declared lost)",
			d.cfg.NodeName, rc.Until.UTC().Format(time.RFC3339))
	case migration.RecoveryAttemptFailed:
		m.EventReason = "PostCopyRecoveryAttempt"
		m.Message = fmt.Sprintf("post-copy recovery attempt %d failed: %s; Ferry tries again until %s", rc.Attempts, rc.LastError, rc.Until.UTC().Format(time.RFC3339))
	case migration.RecoveryResumedStream:
		st.State, m.EventType, m.EventReason = "resumed", "Normal", "PostCopyResumed"
		m.Message = fmt.Sprintf("post-copy migration resumed by Ferry on node %s (attempt %d)", d.cfg.NodeName, rc.Attempts)
	default:
		return
	}
	if err := d.reporter.Report(m); err != nil {
		d.log.Error("VMI recovery state", zap.String("vmi", j.Namespace+"/"+j.Name), zap.Error(err))
	}
}

// failureClass names a job's failure for a VMI's readers.
func failureClass(j api.Job) string {
	if k := j.FailureKind(); k != "" {
		return k
	}
	return "unclassified"
}

// reportAdvice tells a KubeVirt VMI, once per migration, what the policy
// would do to its migration: Ferry only advises on migrations it does not
// drive, since virt-launcher's own monitor acts on them.
func (d *Daemon) reportAdvice(j api.Job, step api.PolicyStep) {
	if d.reporter == nil || j.Namespace == "" {
		return
	}
	m := kubevirt.Mark{Namespace: j.Namespace, Name: j.Name, Node: d.cfg.NodeName, Role: string(j.Role), Socket: j.Socket,
		Detected: step.Time, Kind: kubevirt.KindEvent, EventType: "Normal", EventReason: "MigrationPolicyAdvice",
		Message: fmt.Sprintf("Ferry's convergence policy on node %s advises %s at pass %d (advice only, nothing changed): %s",
			d.cfg.NodeName, step.Action, step.Iteration, step.Reason)}
	if err := d.reporter.Report(m); err != nil {
		d.log.Error("VMI policy advice", zap.String("vmi", j.Namespace+"/"+j.Name), zap.Error(err))
	}
}

// jobStarted reads the VMI UID of a KubeVirt domain while its libvirt
// still answers: once post-copy fails, every call on the target's domain
// waits on its state-change lock, and a mark needs the UID then.
func (d *Daemon) jobStarted(j api.Job) {
	if d.reporter == nil || j.Namespace == "" {
		return
	}
	uid := d.domainUID(j.Socket, j.Domain)
	if uid == "" {
		return
	}
	d.uidMu.Lock()
	defer d.uidMu.Unlock()
	// A job that ended while libvirt was asked has had its reportVMI, which
	// takes the entry under this lock: one kept now would never go.
	if _, running := d.Tracker.JobByID(j.ID); running {
		d.uids[j.ID] = uid
	}
}

// jobVMIUID is the UID read when the job started, or else read now (only
// for a mark: a completed job needs none).
func (d *Daemon) jobVMIUID(j api.Job) string {
	d.uidMu.Lock()
	uid, ok := d.uids[j.ID]
	if j.Phase != api.PhaseLost || j.Role != api.RoleSource {
		// A lost source job may yet be completed on its driver's word,
		// and told again.
		delete(d.uids, j.ID)
	}
	d.uidMu.Unlock()
	if ok || j.Phase != api.PhasePostCopyFailed {
		return uid
	}
	return d.domainUID(j.Socket, j.Domain)
}

// domainUID reads the VMI UID from the KubeVirt metadata of the domain on
// the job's own socket, briefly: the mark must not wait on a slow libvirt.
func (d *Daemon) domainUID(socket, domain string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	uid, _ := d.readVMIUID(ctx, socket, domain, "")
	return uid
}

// readVMIUID reads the VMI UID from the KubeVirt metadata of the domain on
// socket, "" when it has none; with uuid set, only of that guest.
func (d *Daemon) readVMIUID(ctx context.Context, socket, domain, uuid string) (string, error) {
	_, ref, err := d.Tracker.DomainRef(socket, domain)
	if err != nil {
		return "", err
	}
	if uuid != "" && libvirtx.UUIDString(ref.UUID) != uuid {
		return "", fmt.Errorf("domain %s on %s is another guest now", domain, socket)
	}
	c, err := d.Pool.Conn(socket)
	if err != nil {
		return "", err
	}
	// The metadata element, not the XML: libvirt answers it at once even
	// while an incoming migration's job holds the domain (a failed
	// post-copy's for as long as it is not resumed).
	return c.DomainKubeVirtUID(ctx, ref)
}

func (d *Daemon) podsDir() string { return d.cfg.KubeletPodsDir }

// withVMI adds the cached VMI to jobs of KubeVirt domains.
// A domain's name alone does not make it the VMI's: any pod can serve a
// libvirt where the launcher glob looks and name a domain like a VM. The
// VMI is shown only for a socket of one of its own launcher pods.
func (d *Daemon) withVMI(j api.Job) api.Job {
	if d.vmis == nil || j.Namespace == "" {
		return j
	}
	if v := d.vmis.Lookup(j.Namespace, j.Name); v != nil && kubevirt.SocketOfVMI(d.podsDir(), j.Socket, v) {
		j.VMI = v
	}
	return j
}
