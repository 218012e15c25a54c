package libvirtx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

func TestMigrationDeadline(t *testing.T) {
	cases := []struct {
		mem  uint64
		bw   int
		want time.Duration
	}{
		{0, 0, MigrationTimeoutFloor},
		{1 << 30, 0, MigrationTimeoutFloor}, // 150 s is under the floor
		{8 << 30, 0, 20 * time.Minute},
		{8 << 30, 1000, 20 * time.Minute},                 // the cap is no constraint
		{8 << 30, 8, time.Duration(3*1024) * time.Second}, // three passes at 8 MiB/s
		{512 << 20, 0, MigrationTimeoutFloor},
	}
	for _, c := range cases {
		if got := MigrationDeadline(c.mem, c.bw); got != c.want {
			t.Errorf("MigrationDeadline(%d MiB, %d MiB/s) = %v, want %v", c.mem>>20, c.bw, got, c.want)
		}
	}
}

// migrateFake holds the migrate call until the job is aborted (answering it
// as libvirt does then), or answers abort with refusal when it is set.
func migrateFake(t *testing.T, refusal *libvirt.Error, after time.Duration) *fakeLibvirt {
	f := newFakeLibvirt(t, "")
	aborted := make(chan struct{})
	f.setAnswer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case procDomainAbortJob:
			close(aborted)
			return nil, refusal, true
		case procMigratePerform3:
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
	if n := len(f.called(procDomainAbortJob)); n != 1 {
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
	f := newFakeLibvirt(t, "")
	c := dialFake(t, f)
	if err := c.Migrate(context.Background(), libvirt.Domain{Name: "vm1"}, "qemu+unix:///system?socket=/x", nil, libvirt.MigrateLive, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := len(f.called(procDomainAbortJob)); n != 0 {
		t.Fatalf("%d aborts of a migration that ended in time", n)
	}
}
