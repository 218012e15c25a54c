package api

// Blocker is one reason a domain cannot move to another host, or may not
// without care. Package preflight documents every Code.
type Blocker struct {
	// Code is stable and snake_case, for scripts and alerts to key on.
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	// Message is one sentence an operator understands without the code.
	Message string `json:"message"`
	// Device names the device concerned as libvirt shows it: a disk's
	// target (vda), a PCI address (0000:03:00.0), an mdev UUID, a
	// filesystem's target, an interface's MAC address.
	Device string `json:"device,omitempty"`
	// Path is the host path involved, if any: a local disk's source, a
	// shared directory, a backend's socket.
	Path string `json:"path,omitempty"`
	// SizeBytes is a local disk's size, what copying it would cost; the
	// domain XML does not hold it, so whoever asks libvirt fills it in.
	SizeBytes uint64 `json:"sizeBytes,omitempty"`
}

// Severity says whether a Blocker stops a migration or asks for care.
type Severity string

const (
	// SeverityBlocks: the domain cannot be live-migrated while it holds
	// this.
	SeverityBlocks Severity = "blocks"
	// SeverityWarns: the domain can move only where the target, or the
	// migration's options, provide what this needs.
	SeverityWarns Severity = "warns"
)
