package libvirtx

import (
	"context"
	"errors"
	"fmt"
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

func TestIsTargetOnlyGoesByErrorCode(t *testing.T) {
	const english = "migration statistics are available only on the source host"
	unsupported := uint32(libvirt.ErrOperationUnsupported)
	// What a German libvirtd says: the code is all that stays the same.
	translated := libvirt.Error{Code: unsupported, Message: "Migrationsstatistiken sind nur auf dem Quellhost verfügbar"}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"translated message, right code", translated, true},
		{"English message, another code", libvirt.Error{Code: uint32(libvirt.ErrOperationInvalid), Message: english}, false},
		{"plain error with the English text", errors.New(english), false},
		{"wrapped in CallError", &CallError{Op: opJobStats, Socket: "s", Err: translated}, true},
		{"CallError wrapped again", fmt.Errorf("sampling: %w", &CallError{Op: opJobStats, Err: translated}), true},
		{"same code from another call", &CallError{Op: "abort job", Err: translated}, false},
		{"nil", nil, false},
	}
	for _, c := range cases {
		if got := IsTargetOnly(c.err); got != c.want {
			t.Errorf("%s: IsTargetOnly = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestIsTargetOnlyOnLibvirtsAnswer(t *testing.T) {
	f := newFakeLibvirt(t, "")
	f.setAnswer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc != procDomainGetJobStats {
			return nil, nil, false
		}
		return nil, &libvirt.Error{Code: uint32(libvirt.ErrOperationUnsupported), Message: "statistiques disponibles uniquement sur l'hôte source"}, true
	})
	_, err := dialFake(t, f).JobStats(context.Background(), libvirt.Domain{Name: "vm1"}, false)
	if !IsTargetOnly(err) {
		t.Fatalf("IsTargetOnly(%v) = false", err)
	}
}
