package migration_test

import (
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
)

// idleLauncher is a tracker serving, with the given tick, a launcher's
// libvirt whose one guest runs with no job, once it has been listed.
func idleLauncher(t *testing.T, tick time.Duration) (*migration.Tracker, *libvirtxtest.Server) {
	t.Helper()
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: libvirt.UUID{7}, ID: 1, State: int32(libvirtx.StateRunning), Reason: 1})
	tr := migration.NewTracker(migration.Config{Node: "n1", SampleInterval: tick})
	migrationtest.Serve(t, tr, f)
	migrationtest.Wait(t, "the first listing", func() bool { return len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats)) >= 1 })
	return tr, f
}

var outgoing = libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
	TimeElapsedMs: 100, MemoryIteration: 1, DataTotal: 256 << 20, MemoryTotal: 256 << 20, DataRemaining: 200 << 20, MemoryRemaining: 200 << 20}

// An idle launcher's guest has its job read every sixth tick and its
// libvirt listed every sixtieth, not every tick; once it migrates, every
// tick. (Ticks a loaded machine skips only lower the counts.)
func TestAnIdleSocketIsReadSeldom(t *testing.T) {
	const tick = 10 * time.Millisecond
	tr, f := idleLauncher(t, tick)
	lists, jobs := len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats)), len(f.Calls(libvirtxtest.ProcDomainGetJobStats))
	start := time.Now()
	time.Sleep(120 * tick)
	ticks := int(time.Since(start) / tick)
	lists, jobs = len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats))-lists, len(f.Calls(libvirtxtest.ProcDomainGetJobStats))-jobs
	if lists > ticks/60+2 || jobs > ticks/6+ticks/60+2 || jobs == 0 {
		t.Errorf("over %d ticks an idle socket was listed %d times and its job read %d times; want about %d and %d", ticks, lists, jobs, ticks/60, ticks/6+ticks/60)
	}
	f.SetJob("vm", outgoing)
	migrationtest.WaitJob(t, tr, f.Path(), "vm", "opened", func(j api.Job) bool { return j.ElapsedMs == 100 })
	before := len(f.Calls(libvirtxtest.ProcDomainGetJobStats))
	time.Sleep(60 * tick)
	if n := len(f.Calls(libvirtxtest.ProcDomainGetJobStats)) - before; n < 15 {
		t.Errorf("a migrating domain's job was read %d times in 60 ticks; want every tick", n)
	}
}

// A migration's first event opens its job at once, ticks of 2 s apart
// (the idle reads' 12 s).
func TestAnIdleSocketsEventsAreReadAtOnce(t *testing.T) {
	tr, f := idleLauncher(t, 2*time.Second)
	f.SetJob("vm", outgoing)
	f.Iteration("vm", 1)
	woke := time.Now()
	migrationtest.WaitJob(t, tr, f.Path(), "vm", "opened by its first pass's event", func(j api.Job) bool { return j.ElapsedMs == 100 })
	if d := time.Since(woke); d > time.Second {
		t.Errorf("the source job opened %v after its first pass's event; want at once", d)
	}
}

// A migration job with no event yet (libvirt's job begins at Begin;
// QEMU's first pass, and its event, come after the target's Prepare and
// any storage copy) is found within the idle reads' six ticks, and its
// failure before any pass is recorded.
func TestAMigrationBeforeItsFirstPassIsFoundAndItsFailureKept(t *testing.T) {
	const tick = 50 * time.Millisecond // idle reads every 300 ms, listed every 3 s
	tr, f := idleLauncher(t, tick)
	f.SetJob("vm", libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
		TimeElapsedMs: 50, DataTotal: 8 << 30, DataRemaining: 8 << 30, DiskTotal: 8 << 30, DiskRemaining: 8 << 30})
	set := time.Now()
	migrationtest.Wait(t, "the job copying storage", func() bool { return tr.InFlight(f.Path(), "vm") })
	if d := time.Since(set); d > 30*tick {
		t.Errorf("found %v after libvirt's job began; want within the idle reads' 6 ticks", d)
	}
	f.SetJob("vm", nil)
	f.SetCompletedJob("vm", libvirtx.JobStats{Type: libvirtx.JobFailed, Operation: libvirtx.OperationMigrationOut, TimeElapsedMs: 300, ErrMsg: "nbd: no space"})
	migrationtest.WaitJob(t, tr, f.Path(), "vm", "failed", func(j api.Job) bool { return j.Phase == api.PhaseFailed })
}
