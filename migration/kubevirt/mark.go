package kubevirt

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ferry-vm/ferry/api"
)

// Mark is one thing to tell the API server about a VMI, kept on disk until
// it is told: a post-copy failure (label, annotation + Event) or an Event
// alone.
type Mark struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"` // "irrecoverable" or "event"
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the VMI's UID from the domain's KubeVirt metadata; empty for a
	// domain without any, whose mark is then not checked against the VMI.
	UID string `json:"uid,omitempty"`
	// Socket is the libvirt socket the job was seen on. Under the
	// kubelet's pods directory it names the launcher pod, which must be one
	// of the VMI's: any pod can place a socket there and claim a VMI.
	Socket   string    `json:"socket,omitempty"`
	Node     string    `json:"node"`
	Role     string    `json:"role"`
	Detected time.Time `json:"detected"`
	// Message is the human account that goes into the Event.
	Message string `json:"message"`
	// Reason, RemainingBytes and PostCopyRequests are the job's last word
	// and figures, for the failure annotation.
	Reason           string `json:"reason,omitempty"`
	RemainingBytes   uint64 `json:"remainingBytes,omitempty"`
	PostCopyRequests uint64 `json:"postCopyRequests,omitempty"`
	// EventType and EventReason are for Kind "event".
	EventType   string `json:"eventType,omitempty"`
	EventReason string `json:"eventReason,omitempty"`
	// Recovery is a KindRecovering mark's annotation.
	Recovery *RecoveryState `json:"recovery,omitempty"`
	// Patched records that the label is set and only the Event remains,
	// so a retry after a crash neither patches twice nor loses the Event.
	Patched bool `json:"patched,omitempty"`
	Tries   int  `json:"tries,omitempty"`
	// RefusedSince is when the API server began refusing the mark.
	RefusedSince time.Time `json:"refusedSince,omitempty"`
}

// Kinds of marks.
const (
	KindIrrecoverable = "irrecoverable"
	KindEvent         = "event"
	// KindRecovered takes an irrecoverable mark off (label, annotation)
	// with an Event: the post-copy it named completed after all (libvirt
	// completes one whose API call failed while QEMU's stream went on).
	KindRecovered = "recovered"
	// KindRecovering sets (or, once it is over, removes) the recovery
	// annotation of a post-copy being resumed, with an Event.
	KindRecovering = "recovering"
)

// RecoveryState is the recovery annotation's content.
type RecoveryState struct {
	// State is paused (waiting for the path, or between attempts),
	// resumed (its stream runs again), or over (the annotation goes).
	State     string    `json:"state"`
	Node      string    `json:"node"`
	Until     time.Time `json:"until"`
	Attempts  int       `json:"attempts"`
	Resumed   int       `json:"resumed"`
	LastError string    `json:"lastError,omitempty"`
	Updated   time.Time `json:"updated"`
}

// RecoveryOver is the State that removes the annotation.
const RecoveryOver = "over"

func (m Mark) key() string { return m.Namespace + "/" + m.Name }

func (m Mark) validate() error {
	var errs []string
	// The namespace and name become a file name and an API path: only
	// what Kubernetes itself accepts.
	if msgs := validation.IsDNS1123Label(m.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("namespace %q: %s", m.Namespace, strings.Join(msgs, ", ")))
	}
	if msgs := validation.IsDNS1123Subdomain(m.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("name %q: %s", m.Name, strings.Join(msgs, ", ")))
	}
	switch m.Kind {
	case KindIrrecoverable, KindEvent, KindRecovered, KindRecovering:
	default:
		errs = append(errs, fmt.Sprintf("kind %q is none of %s, %s, %s and %s", m.Kind, KindIrrecoverable, KindEvent, KindRecovered, KindRecovering))
	}
	if m.Kind == KindRecovering && m.Recovery == nil {
		errs = append(errs, "a recovery mark needs its state")
	}
	if (m.Kind == KindEvent || m.Kind == KindRecovering) && (m.EventReason == "" || (m.EventType != "Normal" && m.EventType != "Warning")) {
		errs = append(errs, "an event needs a reason and type Normal or Warning")
	}
	if len(errs) > 0 {
		return fmt.Errorf("mark for %s: %s", m.key(), strings.Join(errs, "; "))
	}
	return nil
}

// SocketOfVMI says whether a libvirt socket may serve vmi's domain: one in
// a pod's directory must be in one of the VMI's own active pods; any other
// pod can serve a libvirt where the launcher glob looks and name a domain
// like a VM. A socket outside the pods directory (a plain libvirt host's)
// belongs to no pod and is not held to it.
func SocketOfVMI(podsDir, socket string, vmi *api.VMIInfo) bool {
	pod := PodOfSocket(podsDir, socket)
	if pod == "" {
		return true
	}
	_, ok := vmi.ActivePods[pod]
	return ok
}

// PodOfSocket returns the pod whose directory under podsDir holds socket,
// or "" when socket is not under podsDir: a plain libvirt host's socket,
// which belongs to no pod.
func PodOfSocket(podsDir, socket string) string {
	if podsDir == "" || socket == "" {
		return ""
	}
	rel, err := filepath.Rel(filepath.Clean(podsDir), filepath.Clean(socket))
	if err != nil || !filepath.IsLocal(rel) {
		return ""
	}
	uid, rest, ok := strings.Cut(filepath.ToSlash(rel), "/")
	if !ok || rest == "" {
		return ""
	}
	return uid
}
