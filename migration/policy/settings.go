// Package policy decides how to steer a pre-copy migration that will not
// finish on its own: raise the allowed downtime to what a switch-over needs,
// switch to post-copy, or abort with the figures that say why. It reads the
// tracker's record of a job and returns a decision; it never calls libvirt
// and keeps no state but the small Memory each job carries, so a decision
// can be replayed from a recorded iteration series.
package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Mode says how far the policy may go with a migration.
type Mode string

const (
	// Observe only judges convergence, as the tracker always has.
	Observe Mode = "observe"
	// Advise decides and shows the decision but changes nothing.
	Advise Mode = "advise"
	// Act carries decisions out.
	Act Mode = "act"
)

// Scope says which migrations Act may touch.
type Scope string

const (
	// ScopeDriven acts only on migrations Ferry drives; others are advised,
	// since whoever started them (virt-launcher) runs its own monitor.
	ScopeDriven Scope = "driven"
	// ScopeAll acts on every migration this node sees.
	ScopeAll Scope = "all"
)

// Settings are named as KubeVirt's MigrationPolicy names them; they are
// no wire format (the API shows them as api types).
type Settings struct {
	Mode  Mode
	Scope Scope
	// MaxDowntime caps the guest pause a switch-over may cost.
	MaxDowntime       time.Duration
	AllowPostCopy     bool
	AllowAutoConverge bool
	// BandwidthPerMigrationMiBs caps pre-copy (0: unlimited).
	BandwidthPerMigrationMiBs uint64
	// CompletionTimeoutPerGiB is a backstop, for each GiB of data to
	// move: at it, post-copy if allowed, else abort (0: none).
	CompletionTimeoutPerGiB time.Duration
}

// Defaults: a downtime cap of 500 ms, where VDSM's and Nova's downtime
// ramps end, and KubeVirt's 150 s/GiB backstop.
func Defaults() Settings {
	return Settings{Mode: Observe, Scope: ScopeDriven, MaxDowntime: 500 * time.Millisecond, CompletionTimeoutPerGiB: DefaultCompletionTimeoutPerGiB}
}

// QEMU's own limit on the allowed downtime.
const maxDowntimeLimit = 2000 * time.Second

// Validate names every field that is wrong.
func (s Settings) Validate() error {
	var errs []string
	switch s.Mode {
	case Observe, Advise, Act:
	default:
		errs = append(errs, fmt.Sprintf("mode %q (want observe, advise or act)", s.Mode))
	}
	switch s.Scope {
	case "", ScopeDriven, ScopeAll:
	default:
		errs = append(errs, fmt.Sprintf("scope %q (want driven or all)", s.Scope))
	}
	if s.MaxDowntime < time.Millisecond || s.MaxDowntime > maxDowntimeLimit {
		errs = append(errs, fmt.Sprintf("max downtime %d ms (want 1 to %d)", s.MaxDowntime/time.Millisecond, maxDowntimeLimit/time.Millisecond))
	}
	if len(errs) > 0 {
		return errors.New("policy: bad " + strings.Join(errs, ", "))
	}
	return nil
}

// ModeFor is the mode that applies to one migration: Act only where the
// scope lets it act.
func (s Settings) ModeFor(driven bool) Mode {
	if s.Mode == Act && !driven && s.Scope != ScopeAll {
		return Advise
	}
	return s.Mode
}

// ParseMode reads a mode name.
func ParseMode(v string) (Mode, error) {
	switch m := Mode(strings.ToLower(v)); m {
	case Observe, Advise, Act:
		return m, nil
	}
	return "", fmt.Errorf("policy mode %q: want observe, advise or act", v)
}
