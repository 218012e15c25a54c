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

// An idle launcher's libvirt is listed every sixth tick and its guest's
// job read every sixtieth, not every tick; a migration's first event
// wakes it at once, and one whose events were lost is still found.
func TestAnIdleSocketIsReadSeldomAndWokenByItsEvents(t *testing.T) {
	const tick = 10 * time.Millisecond
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: libvirt.UUID{7}, ID: 1, State: int32(libvirtx.StateRunning), Reason: 1})
	tr := migration.NewTracker(migration.Config{Node: "n1", SampleInterval: tick})
	migrationtest.Serve(t, tr, f)
	migrationtest.Wait(t, "the first listing", func() bool { return len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats)) >= 1 })

	lists, jobs := len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats)), len(f.Calls(libvirtxtest.ProcDomainGetJobStats))
	start := time.Now()
	time.Sleep(120 * tick)
	ticks := int(time.Since(start) / tick)
	lists, jobs = len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats))-lists, len(f.Calls(libvirtxtest.ProcDomainGetJobStats))-jobs
	if lists > ticks/6+2 || jobs > ticks/60+2 {
		t.Errorf("over %d ticks an idle socket was listed %d times and its job read %d times; want about %d and %d", ticks, lists, jobs, ticks/6, ticks/60)
	}
	if lists < ticks/6/2 {
		t.Errorf("over %d ticks an idle socket was listed only %d times; want about %d", ticks, lists, ticks/6)
	}

	out := libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
		TimeElapsedMs: 100, MemoryIteration: 1, DataTotal: 256 << 20, MemoryTotal: 256 << 20, DataRemaining: 200 << 20, MemoryRemaining: 200 << 20}
	f.SetJob("vm", out)
	f.Iteration("vm", 1)
	woke := time.Now()
	migrationtest.WaitJob(t, tr, f.Path(), "vm", "opened by its first pass's event", func(j api.Job) bool { return j.ElapsedMs == 100 })
	if d := time.Since(woke); d > 5*tick {
		t.Errorf("the source job opened %v after its first pass's event; want within a few ticks", d)
	}
	before := len(f.Calls(libvirtxtest.ProcDomainGetJobStats))
	time.Sleep(20 * tick)
	if n := len(f.Calls(libvirtxtest.ProcDomainGetJobStats)) - before; n < 10 {
		t.Errorf("a migrating domain's job was read %d times in 20 ticks; want every tick", n)
	}
}

// A migration whose events never came is found by the sweep.
func TestAMigrationWithoutEventsIsFoundByTheSweep(t *testing.T) {
	const tick = 10 * time.Millisecond
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: libvirt.UUID{8}, ID: 1, State: int32(libvirtx.StateRunning), Reason: 1})
	tr := migration.NewTracker(migration.Config{Node: "n1", SampleInterval: tick})
	migrationtest.Serve(t, tr, f)
	migrationtest.Wait(t, "the first listing", func() bool { return len(f.Calls(libvirtxtest.ProcConnectGetAllDomainStats)) >= 1 })
	f.SetJob("vm", libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
		TimeElapsedMs: 300, MemoryIteration: 1, DataTotal: 256 << 20, MemoryTotal: 256 << 20, DataRemaining: 200 << 20, MemoryRemaining: 200 << 20})
	set := time.Now()
	migrationtest.WaitJob(t, tr, f.Path(), "vm", "found without an event", func(j api.Job) bool { return j.ElapsedMs == 300 })
	if d := time.Since(set); d > 70*tick {
		t.Errorf("found %v after the job began; want within the sweep's 60 ticks", d)
	}
}
