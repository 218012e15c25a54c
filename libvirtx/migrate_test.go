package libvirtx

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// migrateFake holds the migrate call until the job is aborted (answering it
// as libvirt does then), or answers abort with refusal when it is set.
func migrateFake(t *testing.T, refusal *libvirt.Error, after time.Duration) *libvirtxtest.Server {
	f := libvirtxtest.New(t, "")
	aborted := make(chan struct{})
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case libvirtxtest.ProcDomainAbortJob:
			close(aborted)
			return nil, refusal, true
		case libvirtxtest.ProcDomainMigratePerform3Params:
			<-aborted
			if refusal != nil {
				time.Sleep(after)
				return be32(0), nil, true
			}
			return nil, &libvirt.Error{Code: uint32(libvirt.ErrOperationAborted), Message: "operation aborted: job 'migration out' canceled by client"}, true
		}
		return nil, nil, false
	})
	return f
}

func TestMigratePastDeadlineAbortsLibvirtsJob(t *testing.T) {
	f := migrateFake(t, nil, 0)
	c := dialFake(t, f)
	err := c.Migrate(context.Background(), libvirt.Domain{Name: "vm1"}, "qemu+unix:///system?socket=/x", nil, libvirt.MigrateLive, 100*time.Millisecond)
	if !errors.Is(err, ErrMigrationDeadline) || !strings.Contains(err.Error(), "libvirt job aborted") {
		t.Fatalf("err %v, want ErrMigrationDeadline saying the job was aborted", err)
	}
	var le libvirt.Error
	if !errors.As(err, &le) || le.Code != uint32(libvirt.ErrOperationAborted) {
		t.Fatalf("err %v does not carry libvirt's own answer", err)
	}
	if n := len(f.Calls(libvirtxtest.ProcDomainAbortJob)); n != 1 {
		t.Fatalf("%d aborts, want 1", n)
	}
}

func TestMigrateInPostCopyWaitsWhenAbortIsRefused(t *testing.T) {
	refusal := &libvirt.Error{Code: uint32(libvirt.ErrOperationInvalid), Message: "cannot abort migration in post-copy mode"}
	f := migrateFake(t, refusal, 200*time.Millisecond)
	c := dialFake(t, f)
	start := time.Now()
	err := c.Migrate(context.Background(), libvirt.Domain{Name: "vm1"}, "qemu+unix:///system?socket=/x", nil, libvirt.MigrateLive, 50*time.Millisecond)
	if err != nil {
		t.Fatalf("post-copy that completed after the deadline: %v", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("returned after %v, before the migration ended", took)
	}
}

func TestMigrateWithinDeadline(t *testing.T) {
	f := libvirtxtest.New(t, "")
	c := dialFake(t, f)
	if err := c.Migrate(context.Background(), libvirt.Domain{Name: "vm1"}, "qemu+unix:///system?socket=/x", nil, libvirt.MigrateLive, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Calls(libvirtxtest.ProcDomainAbortJob)); n != 0 {
		t.Fatalf("%d aborts of a migration that ended in time", n)
	}
}

// A Prepare libvirt answers after Ferry gave up on it (a libvirtd frozen
// for a while) is undone: its target QEMU is told to go, by name.
func TestAPrepareAnsweredLateIsUndone(t *testing.T) {
	f := libvirtxtest.New(t, "")
	release := make(chan struct{})
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcDomainMigratePrepare3Params {
			<-release
			return be32(0, 0), nil, true // no cookie, no URI
		}
		if proc == libvirtxtest.ProcDomainMigrateFinish3Params {
			return nil, &libvirt.Error{Code: uint32(libvirt.ErrOperationFailed), Message: "migration cancelled"}, true
		}
		return nil, nil, false
	})
	c := dialFake(t, f)
	params := []libvirt.TypedParam{
		{Field: libvirt.MigrateParamDestXML, Value: *libvirt.NewTypedParamValueString("<domain/>")},
		{Field: libvirt.MigrateParamDestName, Value: *libvirt.NewTypedParamValueString("vm1")},
	}
	if _, err := c.Prepare(context.Background(), params, nil, libvirt.MigrateLive, 100*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("prepare: %v, want a timeout", err)
	}
	if n := len(f.Calls(libvirtxtest.ProcDomainMigrateFinish3Params)); n != 0 {
		t.Fatalf("%d finishes before libvirt answered the prepare", n)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for len(f.Calls(libvirtxtest.ProcDomainMigrateFinish3Params)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	calls := f.Calls(libvirtxtest.ProcDomainMigrateFinish3Params)
	if len(calls) != 1 || !bytes.Contains(calls[0], []byte("vm1")) || bytes.Contains(calls[0], []byte("<domain/>")) || libvirtxtest.Flags(calls[0]) != 1 {
		t.Fatalf("finish calls %q; want one, cancelled, naming vm1 only", calls)
	}
}
