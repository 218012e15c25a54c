package drive

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
	"github.com/ferry-vm/ferry/migration/policy"
)

// poolConn is the pool's connection to one libvirt, or why there is none.
type poolConn struct {
	c   *libvirtx.Conn
	err error
}

func (p poolConn) Conn(string) (*libvirtx.Conn, error) { return p.c, p.err }

// migratingOut is a fake libvirt whose guest "vm" migrates out, read by
// tr's sampler, and a connection of the pool's to it.
func migratingOut(t *testing.T) (*migration.Tracker, Record, *libvirtxtest.Server, *libvirtx.Conn) {
	t.Helper()
	tr, rec := newRecord(migration.Config{Node: "n1", SampleInterval: 20 * time.Millisecond})
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: libvirt.UUID{9}, ID: 1, State: int32(libvirtx.StateRunning), Reason: 1})
	migrationtest.Serve(t, tr, f)
	f.SetJob("vm", libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
		TimeElapsedMs: 1000, MemoryIteration: 1, DataTotal: 512 << 20, MemoryTotal: 512 << 20, DataRemaining: 300 << 20, MemoryRemaining: 300 << 20})
	migrationtest.WaitJob(t, tr, f.Path(), "vm", "in flight", func(j api.Job) bool { return j.ElapsedMs == 1000 })
	c, err := libvirtx.Dial(context.Background(), f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return tr, rec, f, c
}

// An act whose libvirt the pool cannot reach asks it nothing, and so
// leaves nothing on the job: an abort no libvirt heard of must not class
// the migration's end as the operator's.
func TestAnActThatCannotReachLibvirtLeavesNoRecord(t *testing.T) {
	tr, rec, f, _ := migratingOut(t)
	a := NewActuator(nil, poolConn{err: libvirtx.ErrNotConnected}, rec)
	ref := migration.JobRef{Domain: "vm"}
	before, _ := tr.Job("vm")
	ctx := context.Background()
	if _, err := a.Abort(ctx, ref, false, migration.AbortByOperator, ""); !errors.Is(err, migration.ErrNoLibvirt) {
		t.Errorf("abort: %v, want ErrNoLibvirt", err)
	}
	if _, err := a.StartPostCopy(ctx, ref, "by a test"); !errors.Is(err, migration.ErrNoLibvirt) {
		t.Errorf("post-copy: %v, want ErrNoLibvirt", err)
	}
	if err := a.SetMaxDowntime(ctx, ref, time.Second); !errors.Is(err, migration.ErrNoLibvirt) {
		t.Errorf("max downtime: %v, want ErrNoLibvirt", err)
	}
	after, _ := tr.Job("vm")
	if after.AbortStatus != "" || after.AbortedBy != "" || len(after.Events) != len(before.Events) || after.MaxDowntimeMs != before.MaxDowntimeMs {
		t.Errorf("job after: abortStatus %q by %q, %d events (before %d), max downtime %d ms", after.AbortStatus, after.AbortedBy,
			len(after.Events), len(before.Events), after.MaxDowntimeMs)
	}
	for _, proc := range []uint32{libvirtxtest.ProcDomainAbortJob, libvirtxtest.ProcDomainAbortJobFlags, libvirtxtest.ProcDomainMigrateStartPostCopy, libvirtxtest.ProcDomainMigrateSetMaxDowntime} {
		if n := len(f.Calls(proc)); n != 0 {
			t.Errorf("libvirt got %d calls of procedure %d", n, proc)
		}
	}
}

// A migration Ferry does not drive is acted on by the pool's connection
// to its libvirt, and the tracker records what libvirt took.
func TestAnActOnAMigrationFerryDoesNotDriveIsMadeAndRecorded(t *testing.T) {
	tr, rec, f, c := migratingOut(t)
	a := NewActuator(nil, poolConn{c: c}, rec)
	ref := migration.JobRef{Domain: "vm"}
	ctx := context.Background()
	if err := a.SetMaxDowntime(ctx, ref, 700*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Calls(libvirtxtest.ProcDomainMigrateSetMaxDowntime)); n != 1 {
		t.Errorf("libvirt got %d max downtime calls, want 1", n)
	}
	if j, _ := tr.Job("vm"); j.MaxDowntimeMs != 700 {
		t.Errorf("max downtime recorded %d ms, want 700", j.MaxDowntimeMs)
	}
	res, err := a.Abort(ctx, ref, false, migration.AbortByOperator, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Calls(libvirtxtest.ProcDomainAbortJob)) + len(f.Calls(libvirtxtest.ProcDomainAbortJobFlags)); n != 1 {
		t.Errorf("libvirt got %d aborts, want 1", n)
	}
	if res.Job.AbortStatus != api.AbortAborting || res.Job.AbortedBy != migration.AbortByOperator || res.Message == "" {
		t.Errorf("abort result %+v: want the job Aborting by the operator, and what it does", res)
	}
}

// ownerActs stands for a driven migration's owner.
type ownerActs struct{ policy.Actuator }

// The policy acts on a migration Ferry drives through its owner while its
// Perform runs, and not at all after; on any other, on its libvirt. A
// driven job is found by its migration ID, which is not the tracker's ID
// of its job.
func TestThePolicyActsThroughTheOwnerWhileItRuns(t *testing.T) {
	s := &Source{running: newDrives()}
	a := NewActuator(s, poolConn{err: libvirtx.ErrNotConnected}, recordOnly(migration.Config{Node: "n1"}))
	key := driveKey("/run/libvirt/libvirt-sock", "vm")
	if !s.running.start(key) {
		t.Fatal("a first drive was refused")
	}
	owner := ownerActs{}
	s.running.own(key, "m-b843354540a18d5a", &Owner{}, Driven{Act: owner})
	driven := api.Job{ID: "n1-1", Domain: "vm", Proxy: &api.ProxyInfo{MigrationID: "m-b843354540a18d5a"}}
	if got := a.Policy(driven); got != policy.Actuator(owner) {
		t.Errorf("policy while the owner runs: %T, want the owner", got)
	}
	if got := a.Policy(api.Job{ID: "n1-2", Domain: "other"}); fmt.Sprintf("%T", got) != "drive.poolPolicy" {
		t.Errorf("policy of a job Ferry does not drive: %T, want the pool's", got)
	}
	s.running.disown(key)
	if err := a.Policy(driven).Abort(context.Background(), "stalled"); !errors.Is(err, migration.ErrNoJob) {
		t.Errorf("policy after Perform returned: %v, want a refusal: nothing but the owner acts on it", err)
	}
}

// An operator who asks again for a forced abort that was made, and is
// refused, must not take back the mark that keeps Ferry from resuming the
// pause.
func TestARefusedRetryKeepsTheOperatorsPause(t *testing.T) {
	s := &Source{running: newDrives()}
	key := driveKey("/run/libvirt/libvirt-sock", "vm")
	s.running.start(key)
	s.PauseByOperator("/run/libvirt/libvirt-sock", "vm") // the first, made
	retry := s.PauseByOperator("", "vm")
	retry() // refused: the migration is being aborted already
	if !s.running.operatorPaused(key) {
		t.Fatal("a refused retry took back the operator's pause")
	}
}
