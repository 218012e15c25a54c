package drive

import (
	"context"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration/policy"
	"github.com/ferry-vm/ferry/proxy"

	"go.uber.org/zap"
)

// Source drives migrations from this node: it starts them, owns them
// while they run, settles their end with the target, and settles after a
// restart those its previous process left.
type Source struct {
	cfg     SourceConfig
	tracker Jobs   // what the record shows, read
	books   *Books // the driver's own account
	acts    Acts
	trials  *Trials
	proxy   *proxy.Proxy
	log     *zap.Logger
	running *drives
	slots   *slots
}

// SourceConfig is what a Source depends on.
type SourceConfig struct {
	// NodeSockets are the node's own libvirt sockets (not a pod's): one
	// missing is a libvirtd stopped for a while, never a guest gone.
	NodeSockets []string
	// Record is the node's record of migrations (the tracker's).
	Record Record
	// Conns are this node's connections to its libvirt sockets (the
	// pool's); the migration's own steps run on a connection of their own.
	Conns Conns
	Proxy *proxy.Proxy
	// Policy is the node's convergence policy, which a request may
	// narrow.
	Policy policy.Settings
	// AllowAnyTarget takes a target named by address alone, with no node
	// identity to check (a plain-TCP proxy needs it).
	AllowAnyTarget bool
	// StateDir keeps each migration's record until it is settled; empty,
	// nothing outlives the process.
	StateDir string
	// PostCopyRecoveryTimeout is how long a broken post-copy migration may
	// stay paused before it is overdue (the attempts go on); 0 never
	// resumes.
	PostCopyRecoveryTimeout time.Duration
	// ResumeByMonitor resumes every broken post-copy through Ferry's
	// monitor of the target QEMU, never by libvirt's own protocol (which
	// is used otherwise wherever the target's libvirt does not crash on it).
	ResumeByMonitor bool
	// Quiet, when set, keeps other work off a domain about to migrate
	// (QEMU's dirty-rate measurement) until release is called.
	Quiet func(ctx context.Context, socket, domain string) (release func())
	// DirtyRate, when set, is a domain's measured dirty rate, for
	// choosing a migration's data settings (compression "auto").
	DirtyRate func(socket, domain string) (bytesPerSecond uint64, measured bool)
	// OutboundSlots bounds the migrations driven out at once (default 2);
	// LinkBytesPerSecond, when set, is the link they share (see balance).
	OutboundSlots      int
	LinkBytesPerSecond uint64
	// DirectPeers are the nodes this node may migrate to on the direct
	// path, with QEMU's certificates in QEMUTLSDir (see proxy.Config).
	DirectPeers []string
	QEMUTLSDir  string
	Log         *zap.Logger
}

// Conns hands out the live connection to a libvirt socket (a
// *libvirtx.Pool).
type Conns interface {
	Conn(socket string) (*libvirtx.Conn, error)
}

// NewSource builds the source side of Ferry-driven migrations.
func NewSource(cfg SourceConfig) *Source {
	return &Source{cfg: cfg, tracker: cfg.Record.Jobs, books: cfg.Record.Books, acts: cfg.Record.Acts, trials: cfg.Record.Trials, proxy: cfg.Proxy, log: cfg.Log, running: newDrives(), slots: newSlots(cfg.OutboundSlots)}
}
