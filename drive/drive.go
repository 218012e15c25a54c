package drive

import (
	"time"

	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/policy"
	"github.com/ferry-vm/ferry/proxy"

	"go.uber.org/zap"
)

// Source drives migrations from this node: it starts them, owns them
// while they run, settles their end with the target, and settles after a
// restart those its previous process left.
type Source struct {
	cfg     SourceConfig
	tracker *migration.Tracker
	proxy   *proxy.Proxy
	log     *zap.Logger
	running *registry
}

// SourceConfig is what a Source depends on.
type SourceConfig struct {
	Tracker *migration.Tracker
	Proxy   *proxy.Proxy
	// Policy is the node's convergence policy, which a request may
	// narrow.
	Policy policy.Settings
	// AllowAnyTarget takes a target named by address alone, with no node
	// identity to check (a plain-TCP proxy needs it).
	AllowAnyTarget bool
	// StateDir keeps each migration's record until it is settled; empty,
	// nothing outlives the process.
	StateDir string
	// PostCopyRecoveryTimeout is how long a broken post-copy migration is
	// resumed again before its guest is declared lost; 0 never resumes.
	PostCopyRecoveryTimeout time.Duration
	Log                     *zap.Logger
}

// NewSource builds the source side of Ferry-driven migrations.
func NewSource(cfg SourceConfig) *Source {
	return &Source{cfg: cfg, tracker: cfg.Tracker, proxy: cfg.Proxy, log: cfg.Log, running: newRegistry()}
}
