package libvirtxtest_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

func dial(t *testing.T, s *libvirtxtest.Server) *libvirtx.Conn {
	t.Helper()
	c, err := libvirtx.Dial(context.Background(), s.Path(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var vm = libvirtxtest.Domain{Name: "vm1", UUID: libvirt.UUID{1, 2}, ID: 7, State: int32(libvirtx.StateRunning), Reason: 1}

// Every figure libvirtx reads comes back as set: a JobStats field the
// fake has no libvirt name for fails here first.
func TestJobStatsComeBackAsSet(t *testing.T) {
	var want libvirtx.JobStats
	v := reflect.ValueOf(&want).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(uint64(i+1) << 12) // whole pages, for the dirty rate
		case reflect.Int32:
			f.SetInt(int64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.String:
			f.SetString("migration failed: " + v.Type().Field(i).Name)
		default:
			t.Fatalf("JobStats.%s is a %s: teach the fake and this test", v.Type().Field(i).Name, f.Type())
		}
	}
	want.Type = libvirtx.JobUnbounded
	want.MemoryPageSize = 2048
	s := libvirtxtest.New(t, "")
	s.SetDomains(vm)
	s.SetJob(vm.Name, want)
	got, err := dial(t, s).JobStats(context.Background(), libvirt.Domain{Name: vm.Name}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("read back\n%+v\nset\n%+v", got, want)
	}
}

func TestDomainsStatesAndCompletedJobs(t *testing.T) {
	s := libvirtxtest.New(t, "")
	off := libvirtxtest.Domain{Name: "off", ID: -1, State: int32(libvirtx.StateShutoff), Reason: libvirtx.ShutoffMigrated}
	s.SetDomains(vm, off)
	c := dial(t, s)
	ctx := context.Background()
	doms, err := c.Domains(ctx)
	if err != nil || len(doms) != 1 || doms[0].Name != vm.Name || doms[0].Ref.ID != vm.ID || doms[0].Ref.UUID != vm.UUID ||
		doms[0].State != libvirtx.StateRunning || doms[0].Reason != 1 {
		t.Fatalf("active domains %+v, %v; want vm1 alone, running/booted", doms, err)
	}
	done := libvirtx.JobStats{Type: libvirtx.JobCompleted, Operation: libvirtx.OperationMigrationOut, DowntimeMs: 40}
	s.SetCompletedJob(off.Name, done)
	ref := libvirt.Domain{Name: off.Name}
	if _, err := c.JobStats(ctx, ref, false); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("active job of a shut-off domain: %v, want libvirt's refusal", err)
	}
	// Kept for the next reader: libvirtx asks to keep them.
	for range 2 {
		if got, err := c.JobStats(ctx, ref, true); err != nil || got != done {
			t.Fatalf("completed job %+v, %v; want %+v", got, err, done)
		}
	}
	if st, reason, err := c.DomainState(ctx, ref); err != nil || st != libvirtx.StateShutoff || reason != libvirtx.ShutoffMigrated {
		t.Errorf("state %v/%d, %v", st, reason, err)
	}
	s.RemoveDomain(off.Name)
	if _, _, err := c.DomainState(ctx, ref); !libvirtx.IsNoDomain(err) {
		t.Errorf("state of a removed domain: %v, want no domain", err)
	}
	if calls := s.Calls(libvirtxtest.ProcDomainGetJobStats); len(calls) != 3 || libvirtxtest.Flags(calls[1]) != 3 {
		t.Errorf("job stats calls %q", calls)
	}
}

func TestAbortCancelsTheJob(t *testing.T) {
	s := libvirtxtest.New(t, "")
	s.SetDomains(vm)
	running := libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut, TimeElapsedMs: 1500, DataTotal: 1 << 30}
	s.SetJob(vm.Name, running)
	c := dial(t, s)
	ctx := context.Background()
	ref := libvirt.Domain{Name: vm.Name}
	if err := c.AbortJob(ctx, ref, false); err != nil {
		t.Fatal(err)
	}
	if err := c.AbortJob(ctx, ref, false); err == nil {
		t.Error("a second abort with no job was answered")
	}
	now, _ := c.JobStats(ctx, ref, false)
	done, _ := c.JobStats(ctx, ref, true)
	running.Type = libvirtx.JobCancelled
	if now.Type != libvirtx.JobNone || done != running {
		t.Fatalf("after abort: current %+v, completed %+v", now, done)
	}
}

func TestEventsReachSubscribers(t *testing.T) {
	s := libvirtxtest.New(t, "")
	s.SetDomains(vm)
	c := dial(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := c.Subscribe(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	s.Lifecycle(vm.Name, libvirtx.EventSuspended, libvirtx.SuspendedPostCopy)
	s.Iteration(vm.Name, 3)
	var got []string
	for len(got) < 2 {
		select {
		case ev := <-events:
			if ev.Domain.Name != vm.Name || ev.Domain.ID != vm.ID || ev.Socket != s.Path() {
				t.Errorf("event %+v", ev)
			}
			got = append(got, ev.String())
		case <-time.After(5 * time.Second):
			t.Fatalf("events received: %q", got)
		}
	}
	// Each kind comes through its own subscription: their order may differ.
	if strings.Join(got, ",") != "lifecycle suspended/post-copy,migration-iteration 3" &&
		strings.Join(got, ",") != "migration-iteration 3,lifecycle suspended/post-copy" {
		t.Fatalf("events %q", got)
	}
}

// An unserved procedure is answered as libvirtd answers one it does not
// know (go-libvirt's ErrUnsupported); the test's log names it.
func TestUnknownProceduresAreAnsweredAsLibvirtdDoes(t *testing.T) {
	s := libvirtxtest.New(t, "")
	s.SetDomains(vm)
	_, err := dial(t, s).Persistent(context.Background(), libvirt.Domain{Name: vm.Name})
	if !errors.Is(err, libvirt.ErrUnsupported) {
		t.Fatalf("an unserved procedure: %v, want libvirtd's unknown-procedure answer", err)
	}
}

func TestAnswerOverridesAndCallsAreRecorded(t *testing.T) {
	s := libvirtxtest.New(t, "")
	s.SetDomains(vm)
	s.Answer(func(proc uint32, args []byte) ([]byte, *libvirt.Error, bool) {
		if proc != libvirtxtest.ProcDomainMigrateGetMaxDowntime {
			return nil, nil, false
		}
		return nil, &libvirt.Error{Code: uint32(libvirt.ErrOperationFailed), Message: "injected"}, true
	})
	c := dial(t, s)
	if _, err := c.MaxDowntime(context.Background(), libvirt.Domain{Name: vm.Name}); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("overridden call: %v", err)
	}
	s.Answer(nil)
	if d, err := c.MaxDowntime(context.Background(), libvirt.Domain{Name: vm.Name}); err != nil || d != 300*time.Millisecond {
		t.Fatalf("max downtime %v, %v; want libvirt's default", d, err)
	}
	if err := c.SetMaxDowntime(context.Background(), libvirt.Domain{Name: vm.Name}, 750*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.MaxDowntime(context.Background(), libvirt.Domain{Name: vm.Name}); d != 750*time.Millisecond {
		t.Fatalf("max downtime %v after setting 750ms", d)
	}
	calls := s.Calls(libvirtxtest.ProcDomainMigrateGetMaxDowntime)
	if len(calls) != 3 || !strings.Contains(string(calls[0]), vm.Name) {
		t.Fatalf("recorded %q", calls)
	}
}

// What libvirt refuses, the fake refuses: a plain abort in post-copy, a
// post-copy pause outside it, a switch with no outgoing migration, and an
// incoming migration's statistics on its target.
func TestTheFakeRefusesWhatLibvirtRefuses(t *testing.T) {
	ctx := context.Background()
	s := libvirtxtest.New(t, "")
	s.SetDomains(vm)
	c := dial(t, s)
	dom := libvirt.Domain{Name: vm.Name}
	invalid := func(what string, err error) {
		t.Helper()
		var le libvirt.Error
		if !errors.As(err, &le) || le.Code != uint32(libvirt.ErrOperationInvalid) {
			t.Errorf("%s: %v, want libvirt's operation-invalid refusal", what, err)
		}
	}
	s.SetJob(vm.Name, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationIn})
	if _, err := c.JobStats(ctx, dom, false); !libvirtx.IsTargetOnly(err) {
		t.Errorf("an incoming migration's statistics: %v, want libvirt's only-on-the-source answer", err)
	}
	invalid("post-copy with no outgoing migration", c.StartPostCopy(ctx, dom))
	s.SetJob(vm.Name, libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut})
	invalid("a post-copy pause in pre-copy", c.AbortJob(ctx, dom, true))
	if err := c.StartPostCopy(ctx, dom); err != nil {
		t.Errorf("post-copy of an outgoing migration: %v", err)
	}
	s.SetState(vm.Name, int32(libvirtx.StatePaused), libvirtx.PausedPostCopy)
	invalid("a plain abort in post-copy", c.AbortJob(ctx, dom, false))
	if err := c.AbortJob(ctx, dom, true); err != nil {
		t.Errorf("a post-copy pause in post-copy: %v", err)
	}
}
