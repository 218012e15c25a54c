package libvirtx

import (
	"context"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

func dialFake(t *testing.T, f *fakeLibvirt) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), f.path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCompletedJobStatsAreKeptForOtherReaders(t *testing.T) {
	f := newFakeLibvirt(t, "")
	c := dialFake(t, f)
	dom := libvirt.Domain{Name: "vm1"}
	for _, completed := range []bool{true, false} {
		if _, err := c.JobStats(context.Background(), dom, completed); err != nil {
			t.Fatal(err)
		}
	}
	calls := f.called(procDomainGetJobStats)
	if len(calls) != 2 {
		t.Fatalf("%d job stats calls, want 2", len(calls))
	}
	keep := uint32(libvirt.DomainJobStatsCompleted | libvirt.DomainJobStatsKeepCompleted)
	if got := lastFlags(calls[0]); got != keep {
		t.Errorf("completed stats read with flags %#x, want COMPLETED|KEEP_COMPLETED (%#x)", got, keep)
	}
	if got := lastFlags(calls[1]); got != 0 {
		t.Errorf("active job stats read with flags %#x, want 0", got)
	}
}
