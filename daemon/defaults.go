package daemon

import (
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/migration/policy"
)

// The defaults ferryd's flags show, kept by the packages they belong to:
// cmd/ferryd knows only this package.
const (
	DefaultPostCopyRecoveryTimeout = drive.DefaultPostCopyRecoveryTimeout
	DefaultOutboundSlots           = drive.DefaultOutboundSlots
	DefaultInboundSlots            = drive.DefaultInboundSlots
)

// The ways a broken post-copy is resumed (--postcopy-resume).
const (
	PostCopyResumeLibvirt = "libvirt"
	PostCopyResumeMonitor = "monitor"
)

// PolicyDefaults is the convergence policy a node runs unless told
// otherwise.
func PolicyDefaults() policy.Settings { return policy.Defaults() }

// SetPolicy sets the policy's mode and scope from their flags' words;
// Validate says what is wrong with them.
func (c *Config) SetPolicy(mode, scope string) {
	c.Policy.Mode, c.Policy.Scope = policy.Mode(mode), policy.Scope(scope)
}
