package migration

import (
	"testing"

	"github.com/ferry-vm/ferry/libvirtx"
)

// Each side of a live migration as libvirt shows it, step by step: at no
// step do both hold the guest, and after it exactly the side that runs it.
func TestOneSideOfAMigrationHoldsTheGuest(t *testing.T) {
	type side struct {
		st     libvirtx.State
		reason int32
	}
	var (
		runningBooted   = side{libvirtx.StateRunning, 1}
		incoming        = side{libvirtx.StatePaused, libvirtx.PausedMigration}
		switchingOver   = side{libvirtx.StatePaused, libvirtx.PausedMigration}
		migratedAway    = side{libvirtx.StateShutoff, libvirtx.ShutoffMigrated}
		runningMigrated = side{libvirtx.StateRunning, libvirtx.RunningMigrated}
		sourcePostCopy  = side{libvirtx.StatePaused, libvirtx.PausedPostCopy}
		targetPostCopy  = side{libvirtx.StateRunning, libvirtx.RunningPostCopy}
		pausedFailed    = side{libvirtx.StatePaused, libvirtx.PausedPostCopyFailed}
		targetFailed    = side{libvirtx.StateRunning, libvirtx.RunningPostCopyFailed}
		sourceLeftPause = side{libvirtx.StatePaused, libvirtx.PausedMigration}
	)
	for _, c := range []struct {
		name             string
		source, target   side
		wantSrc, wantDst bool
	}{
		{"pre-copy", runningBooted, incoming, true, false},
		{"stop-and-copy", switchingOver, incoming, false, false},
		{"pre-copy completed", migratedAway, runningMigrated, false, true},
		{"post-copy", sourcePostCopy, targetPostCopy, false, true},
		{"post-copy completed", migratedAway, runningMigrated, false, true},
		{"post-copy failed, target running", pausedFailed, targetFailed, false, true},
		{"post-copy failed, both paused", pausedFailed, pausedFailed, false, false},
		{"confirm lost: the source left paused", sourceLeftPause, runningMigrated, false, true},
		{"the source resumed its vCPUs after post-copy failed", targetPostCopy, targetFailed, true, true},
	} {
		src, dst := HoldsGuest(c.source.st, c.source.reason), HoldsGuest(c.target.st, c.target.reason)
		if src != c.wantSrc || dst != c.wantDst {
			t.Errorf("%s: source %s/%s holds %v, target %s/%s holds %v; want %v, %v", c.name,
				c.source.st, libvirtx.ReasonName(c.source.st, c.source.reason), src,
				c.target.st, libvirtx.ReasonName(c.target.st, c.target.reason), dst, c.wantSrc, c.wantDst)
		}
	}
}

// A guest halted in any other way is whole and runs again once resumed;
// one that is not running QEMU's guest any more holds nothing.
func TestAHaltedGuestStillHoldsIt(t *testing.T) {
	for reason := int32(0); reason <= 14; reason++ {
		want := reason != libvirtx.PausedMigration && reason != libvirtx.PausedPostCopy && reason != libvirtx.PausedPostCopyFailed
		if got := HoldsGuest(libvirtx.StatePaused, reason); got != want {
			t.Errorf("paused/%s holds %v, want %v", libvirtx.ReasonName(libvirtx.StatePaused, reason), got, want)
		}
	}
	for st, want := range map[libvirtx.State]bool{libvirtx.StateBlocked: true, libvirtx.StateShutdown: true, libvirtx.StatePMSuspended: true,
		libvirtx.StateCrashed: false, libvirtx.StateShutoff: false, libvirtx.StateNoState: false} {
		if got := HoldsGuest(st, 0); got != want {
			t.Errorf("%s holds %v, want %v", st, got, want)
		}
	}
}

// The listing carries the verdict to the debug API and the metrics.
func TestDomainsSayWhichHoldTheGuest(t *testing.T) {
	f := newFeed(t, "b")
	f.list(paused(libvirtx.PausedMigration))
	if d := f.tr.Domains(); len(d) != 1 || d[0].HoldsGuest {
		t.Fatalf("an incoming domain: %+v", d)
	}
	f.list(running(libvirtx.RunningMigrated))
	if d := f.tr.Domains(); len(d) != 1 || !d[0].HoldsGuest {
		t.Fatalf("the migrated guest running: %+v", d)
	}
}
