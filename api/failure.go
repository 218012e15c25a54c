package api

// FailurePlane is where a migration broke: its control path (libvirt and
// Ferry's control stream), its data streams, the guest, or a person or
// policy who stopped it.
type FailurePlane string

const (
	PlaneControl  FailurePlane = "Control"
	PlaneData     FailurePlane = "Data"
	PlaneGuest    FailurePlane = "Guest"
	PlaneOperator FailurePlane = "Operator"
)

// FailureKind is the job's failure as plane/class, e.g. Data/LinkDown;
// empty when the job has no failure class.
func (j Job) FailureKind() string {
	if j.FailureClass == "" {
		return ""
	}
	return string(j.FailurePlane) + "/" + string(j.FailureClass)
}

// FailureClass names why, in a word an alert or a runbook can key on.
type FailureClass string

const (
	ClassTargetUnreachable   FailureClass = "TargetUnreachable"
	ClassTargetRefused       FailureClass = "TargetRefused"
	ClassAuthFailed          FailureClass = "AuthFailed"
	ClassLinkDown            FailureClass = "LinkDown"
	ClassConnectionReset     FailureClass = "ConnectionReset"
	ClassIncomingStreamEnded FailureClass = "IncomingStreamEnded"
	ClassNotConverging       FailureClass = "NotConverging"
	ClassDeadlineExceeded    FailureClass = "DeadlineExceeded"
	ClassPostCopyFailed      FailureClass = "PostCopyFailed"
	ClassSplitBrain          FailureClass = "SplitBrain"
	ClassSourceCPUStarved    FailureClass = "SourceCPUStarved"
	ClassGuestStopped        FailureClass = "GuestStopped"
	ClassAbortedByOperator   FailureClass = "AbortedByOperator"
	ClassAbortedByPolicy     FailureClass = "AbortedByPolicy"
	ClassAbortedExternally   FailureClass = "AbortedExternally"
	ClassLibvirtError        FailureClass = "LibvirtError"
)
