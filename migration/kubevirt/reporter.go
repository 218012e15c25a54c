package kubevirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// ReporterConfig configures a Reporter.
type ReporterConfig struct {
	Node     string
	StateDir string
	Dynamic  dynamic.Interface
	Core     kubernetes.Interface
	Log      *zap.Logger
	// PodsDir is the kubelet's pods directory; a mark from a socket under
	// it is delivered only to a VMI that lists that pod as active.
	PodsDir string
	// ParkAfter is how long a mark may keep being refused before it is set
	// apart (default 10m): an API server that is starting, or RBAC being
	// applied, answers 403 for a while, and a mark must outlive that.
	ParkAfter time.Duration
}

// Reporter delivers marks to the API server, retrying until they land.
type Reporter struct {
	cfg   ReporterConfig
	log   *zap.Logger
	store *store

	mu      sync.Mutex
	pending map[string]Mark // id -> mark
	kick    chan struct{}
	// Delivered counts marks by outcome, for metrics and tests.
	delivered map[string]int
	// recoveryAt is, by VMI, the time of the latest recovery state
	// reported.
	recoveryAt map[string]time.Time
}

// NewReporter loads the marks a previous run left pending.
func NewReporter(cfg ReporterConfig) (*Reporter, error) {
	st, err := newStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if cfg.ParkAfter <= 0 {
		cfg.ParkAfter = 10 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	r := &Reporter{cfg: cfg, log: cfg.Log, store: st, pending: map[string]Mark{}, kick: make(chan struct{}, 1), delivered: map[string]int{},
		recoveryAt: map[string]time.Time{}}
	marks, errs := st.load()
	for _, e := range errs {
		r.log.Error("pending VMI mark unreadable", zap.Error(e))
	}
	for _, m := range marks {
		r.pending[m.ID] = m
	}
	if len(marks) > 0 {
		r.log.Info("pending VMI marks from a previous run", zap.Int("count", len(marks)))
	}
	return r, nil
}

// Report records a mark on disk first, then delivers it as soon as it can.
func (r *Reporter) Report(m Mark) error {
	if err := m.validate(); err != nil {
		return err
	}
	if m.Detected.IsZero() {
		m.Detected = time.Now()
	}
	m.Reason, m.Message = capText(m.Reason), capText(m.Message)
	m.ID = markID(m)
	r.mu.Lock()
	for _, p := range r.pending {
		if p.Kind == m.Kind && p.Kind != KindRecovering && p.key() == m.key() && p.EventReason == m.EventReason {
			r.mu.Unlock()
			return nil // already on its way
		}
	}
	var superseded []string
	if m.Kind == KindRecovering {
		// The latest state is the one to show: reported out of order, an
		// older one is dropped, and older ones not written yet give way.
		at := m.key() + "\x00" + m.UID + "\x00" + m.Socket
		last, seen := r.recoveryAt[at]
		if seen && (m.Detected.Before(last) || !m.Detected.After(last) && m.Recovery.State != RecoveryOver) {
			r.mu.Unlock()
			return nil
		}
		r.recoveryAt[at] = m.Detected
		for id, p := range r.pending {
			if p.Kind == KindRecovering && p.key() == m.key() && p.UID == m.UID && p.Socket == m.Socket && !p.Patched {
				delete(r.pending, id)
				superseded = append(superseded, id)
			}
		}
	}
	if m.Kind == KindIrrecoverable {
		// Its recovery is over: a state not written yet never will be,
		// and none reported after.
		r.recoveryAt[m.key()+"\x00"+m.UID+"\x00"+m.Socket] = farFuture
		for id, p := range r.pending {
			if p.Kind == KindRecovering && p.key() == m.key() && p.UID == m.UID && p.Socket == m.Socket && !p.Patched {
				delete(r.pending, id)
				superseded = append(superseded, id)
			}
		}
	}
	if m.Kind == KindRecovered {
		// A mark not delivered yet is no longer true: it never lands.
		for id, p := range r.pending {
			// Only the same guest's, seen on the same libvirt socket: a
			// pod's domain named like another's VMI drops nothing of it.
			if p.Kind == KindIrrecoverable && p.key() == m.key() && m.UID != "" && p.UID == m.UID && p.Socket == m.Socket && !p.Patched {
				delete(r.pending, id)
				r.delivered["superseded"]++
				superseded = append(superseded, id)
			}
		}
	}
	r.pending[m.ID] = m
	r.mu.Unlock()
	for _, id := range superseded {
		r.store.remove(id)
		r.log.Info("a VMI mark not delivered yet is dropped: a newer word on its post-copy replaces it", zap.String("vmi", m.key()))
	}
	err := r.store.save(m)
	if err != nil {
		r.log.Error("cannot persist VMI mark; delivering from memory only", zap.String("vmi", m.key()), zap.Error(err))
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return err
}

// Pending returns the marks not delivered yet.
func (r *Reporter) Pending() []Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Mark, 0, len(r.pending))
	for _, m := range r.pending {
		out = append(out, m)
	}
	return out
}

// Delivered returns counts of marks by outcome.
func (r *Reporter) Delivered() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.delivered))
	for k, v := range r.delivered {
		out[k] = v
	}
	return out
}

// Run delivers marks until ctx ends, backing off while the API is away.
func (r *Reporter) Run(ctx context.Context) {
	backoff := time.Second
	for {
		failed := r.deliverAll(ctx)
		var wait <-chan time.Time
		if failed {
			wait = time.After(backoff)
			backoff = min(backoff*2, 10*time.Second)
		} else {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-wait:
		}
	}
}

// deliverAll tries each pending mark once; it reports whether any failed.
func (r *Reporter) deliverAll(ctx context.Context) bool {
	r.mu.Lock()
	todo := make([]Mark, 0, len(r.pending))
	for _, m := range r.pending {
		todo = append(todo, m)
	}
	r.mu.Unlock()
	failed := false
	for _, m := range todo {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		outcome, err := r.deliver(actx, &m)
		cancel()
		if refused(err) {
			if m.RefusedSince.IsZero() {
				m.RefusedSince = time.Now()
			}
			if time.Since(m.RefusedSince) >= r.cfg.ParkAfter {
				r.park(m, err)
				continue
			}
		} else if err != nil {
			m.RefusedSince = time.Time{}
		}
		if err != nil {
			failed = true
			m.Tries++
			if m.Tries == 1 || m.Tries%10 == 0 {
				r.log.Warn("VMI mark not delivered yet; will retry", zap.String("vmi", m.key()), zap.String("kind", m.Kind), zap.Int("tries", m.Tries), zap.Error(err))
			}
			r.mu.Lock()
			if _, ok := r.pending[m.ID]; ok {
				r.pending[m.ID] = m
			}
			r.mu.Unlock()
			if m.Patched {
				r.store.save(m)
			}
			continue
		}
		r.mu.Lock()
		delete(r.pending, m.ID)
		r.delivered[outcome]++
		r.mu.Unlock()
		if err := r.store.remove(m.ID); err != nil {
			r.log.Error("cannot remove a delivered VMI mark", zap.String("id", m.ID), zap.Error(err))
		}
		r.log.Info("VMI mark done", zap.String("vmi", m.key()), zap.String("kind", m.Kind), zap.String("outcome", outcome),
			zap.Duration("sinceDetected", time.Since(m.Detected)))
	}
	return failed
}

// refused says whether the API server answered that it will never take
// this request as it is (malformed, not allowed, or failing validation or
// an admission policy): retrying would only repeat it, forever.
func refused(err error) bool {
	return apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}

// park stops delivering a refused mark but keeps its file, set apart, for
// whoever fixes the cause: nothing recorded is lost to a wrong policy.
func (r *Reporter) park(m Mark, err error) {
	r.mu.Lock()
	delete(r.pending, m.ID)
	r.delivered["refused"]++
	r.mu.Unlock()
	where, perr := r.store.park(m)
	if perr != nil {
		r.log.Error("cannot set a refused VMI mark apart", zap.String("id", m.ID), zap.Error(perr))
	}
	r.log.Error("the API server refused a VMI mark; not retrying it", zap.String("vmi", m.key()), zap.String("kind", m.Kind),
		zap.String("keptAt", where), zap.Error(err))
}

// deliver applies one mark; the outcome names what happened.
func (r *Reporter) deliver(ctx context.Context, m *Mark) (string, error) {
	vmi, err := r.cfg.Dynamic.Resource(VMIResource).Namespace(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.log.Warn("VMI no longer exists; dropping its mark", zap.String("vmi", m.key()), zap.String("kind", m.Kind))
		return "vmi_gone", nil
	}
	if err != nil {
		return "", err
	}
	// A VMI is marked irrecoverable only by the UID in its domain's
	// KubeVirt metadata, which virt-launcher always writes: a domain named
	// like a VMI without it (a plain guest, a peer's prepared domain, a
	// pod's fake) marks nothing.
	if m.Kind == KindIrrecoverable && m.UID == "" {
		r.log.Warn("the domain carries no KubeVirt metadata naming its VMI; dropping the mark rather than match by name alone",
			zap.String("vmi", m.key()), zap.String("socket", m.Socket))
		return "no_vmi_uid", nil
	}
	if m.UID != "" && string(vmi.GetUID()) != m.UID {
		r.log.Warn("VMI has another UID than the domain's KubeVirt metadata: a different VMI by the same name; dropping the mark",
			zap.String("vmi", m.key()), zap.String("domainUID", m.UID), zap.String("vmiUID", string(vmi.GetUID())))
		return "uid_mismatch", nil
	}
	if !SocketOfVMI(r.cfg.PodsDir, m.Socket, infoFrom(vmi)) {
		r.log.Warn("the libvirt socket of this mark belongs to a pod that is not one of the VMI's active pods; dropping the mark",
			zap.String("vmi", m.key()), zap.String("kind", m.Kind), zap.String("socket", m.Socket), zap.String("pod", PodOfSocket(r.cfg.PodsDir, m.Socket)))
		return "pod_mismatch", nil
	}
	if m.Kind == KindEvent {
		return "event", r.event(ctx, vmi, m, m.EventType, m.EventReason)
	}
	if m.Kind == KindRecovered {
		return r.unmark(ctx, vmi, m)
	}
	if m.Kind == KindRecovering {
		return r.recovering(ctx, vmi, m)
	}
	if !m.Patched {
		marked, err := r.markIrrecoverable(ctx, m)
		if err != nil {
			return "", err
		}
		if !marked {
			return "already_marked", nil
		}
		m.Patched = true
		r.store.save(*m)
	}
	return "marked", r.event(ctx, vmi, m, corev1.EventTypeWarning, "PostCopyFailed")
}

// markIrrecoverable labels and annotates the VMI in one patch of the main
// resource; false means another writer (the other node's ferryd) already
// did, and that one records the Event. The patch carries the
// resourceVersion it was computed from: two ferryds racing cannot both see
// the label missing and both succeed, the second gets a conflict and, from
// a fresh GET, finds the label there.
func (r *Reporter) markIrrecoverable(ctx context.Context, m *Mark) (bool, error) {
	res := r.cfg.Dynamic.Resource(VMIResource).Namespace(m.Namespace)
	for attempt := 0; attempt < 5; attempt++ {
		vmi, err := res.Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		body, done, err := irrecoverablePatch(vmi, m)
		if err != nil {
			return false, err
		}
		if done {
			// Our own patch whose answer was lost (a timeout after the API
			// server applied it) is still ours: the Event is still owed.
			return markedBy(vmi, m), nil
		}
		_, err = res.Patch(ctx, m.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "ferry"})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return false, err
		}
		return true, nil
	}
	return false, errors.New("VMI kept changing under the patch (5 conflicts)")
}

// unmark takes the irrecoverable label and annotation off, once, and
// records the Event saying why.
func (r *Reporter) unmark(ctx context.Context, vmi *unstructured.Unstructured, m *Mark) (string, error) {
	if m.UID == "" {
		return "no_vmi_uid", nil
	}
	if !m.Patched {
		if vmi.GetLabels()[IrrecoverableLabel] != "true" {
			return "not_marked", nil
		}
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": vmi.GetResourceVersion(),
			"labels":          map[string]any{IrrecoverableLabel: nil},
			"annotations":     map[string]any{FailureAnnotation: nil},
		}})
		if err := r.patchOnce(ctx, m, body, err); err != nil {
			// A conflict is retried from a fresh read.
			return "", err
		}
	}
	return "unmarked", r.event(ctx, vmi, m, corev1.EventTypeNormal, "IrrecoverableMarkRemoved")
}

// patchOnce applies m's merge patch of the VMI's metadata (body, or the
// error making it) and records that it did, so that a retry after a crash
// owes only the Event.
func (r *Reporter) patchOnce(ctx context.Context, m *Mark, body []byte, err error) error {
	if err != nil {
		return err
	}
	if _, err := r.cfg.Dynamic.Resource(VMIResource).Namespace(m.Namespace).Patch(ctx, m.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: "ferry"}); err != nil {
		return err
	}
	m.Patched = true
	r.store.save(*m)
	return nil
}

// farFuture ends a VMI's recovery states: none is newer.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// recovering sets the recovery annotation to m's state (removes it once
// the recovery is over), then records the Event.
func (r *Reporter) recovering(ctx context.Context, vmi *unstructured.Unstructured, m *Mark) (string, error) {
	if m.UID == "" {
		return "no_vmi_uid", nil
	}
	if !m.Patched {
		var ann any
		if m.Recovery.State != RecoveryOver {
			b, err := json.Marshal(m.Recovery)
			if err != nil {
				return "", err
			}
			ann = string(b)
		} else if _, set := vmi.GetAnnotations()[RecoveryAnnotation]; !set {
			return "recovery_not_shown", r.event(ctx, vmi, m, m.EventType, m.EventReason)
		}
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{RecoveryAnnotation: ann}}})
		if err := r.patchOnce(ctx, m, body, err); err != nil {
			return "", err
		}
	}
	return "recovery", r.event(ctx, vmi, m, m.EventType, m.EventReason)
}

// markedBy says whether the VMI's failure annotation is the one m's patch
// writes.
func markedBy(vmi *unstructured.Unstructured, m *Mark) bool {
	var f Failure
	if err := json.Unmarshal([]byte(vmi.GetAnnotations()[FailureAnnotation]), &f); err != nil {
		return false
	}
	return f.Node == m.Node && f.Side == m.Role && f.Detected.Equal(m.Detected)
}

// irrecoverablePatch computes the merge patch of the VMI's metadata; done
// means the VMI already carries the label.
func irrecoverablePatch(vmi *unstructured.Unstructured, m *Mark) ([]byte, bool, error) {
	if vmi.GetLabels()[IrrecoverableLabel] == "true" {
		return nil, true, nil
	}
	f := Failure{Side: m.Role, Node: m.Node, Detected: m.Detected.UTC(), Message: IrrecoverableMessage,
		Reason: capText(m.Reason), RemainingBytes: m.RemainingBytes, PostCopyRequests: m.PostCopyRequests}
	f.MigrationUID, _, _ = unstructured.NestedString(vmi.Object, "status", "migrationState", "migrationUid")
	ann, err := json.Marshal(f)
	if err != nil {
		return nil, false, err
	}
	b, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": vmi.GetResourceVersion(),
			"labels":          map[string]any{IrrecoverableLabel: "true"},
			// The recovery, if there was one, is over.
			"annotations": map[string]any{FailureAnnotation: string(ann), RecoveryAnnotation: nil},
		},
	})
	return b, false, err
}

// event records m's one Event on the VMI, reported by ferry on this node.
// Its name is derived from the mark, so a retry after an answer that was
// lost finds it already there instead of recording it twice.
func (r *Reporter) event(ctx context.Context, vmi *unstructured.Unstructured, m *Mark, typ, reason string) error {
	now := metav1.Now()
	h := fnv.New64a()
	h.Write([]byte(r.cfg.Node + "/" + m.ID))
	// An Event's name is a DNS subdomain of at most 253 characters.
	prefix := vmi.GetName()
	if len(prefix) > 200 {
		prefix = strings.TrimRight(prefix[:200], ".-")
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.ferry-%016x", prefix, h.Sum64()), Namespace: vmi.GetNamespace()},
		InvolvedObject: corev1.ObjectReference{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance",
			Namespace: vmi.GetNamespace(), Name: vmi.GetName(), UID: vmi.GetUID(), ResourceVersion: vmi.GetResourceVersion()},
		Reason: reason, Message: capText(m.Message), Type: typ,
		Source:         corev1.EventSource{Component: "ferry", Host: r.cfg.Node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "ferry", ReportingInstance: r.cfg.Node,
	}
	_, err := r.cfg.Core.CoreV1().Events(vmi.GetNamespace()).Create(ctx, ev, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
