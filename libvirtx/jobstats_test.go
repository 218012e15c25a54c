package libvirtx

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

func dialFake(t *testing.T, f *libvirtxtest.Server) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCompletedJobStatsAreKeptForOtherReaders(t *testing.T) {
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm1", State: int32(StateRunning)})
	c := dialFake(t, f)
	dom := libvirt.Domain{Name: "vm1"}
	for _, completed := range []bool{true, false} {
		if _, err := c.JobStats(context.Background(), dom, completed); err != nil {
			t.Fatal(err)
		}
	}
	calls := f.Calls(libvirtxtest.ProcDomainGetJobStats)
	if len(calls) != 2 {
		t.Fatalf("%d job stats calls, want 2", len(calls))
	}
	keep := uint32(libvirt.DomainJobStatsCompleted | libvirt.DomainJobStatsKeepCompleted)
	if got := libvirtxtest.Flags(calls[0]); got != keep {
		t.Errorf("completed stats read with flags %#x, want COMPLETED|KEEP_COMPLETED (%#x)", got, keep)
	}
	if got := libvirtxtest.Flags(calls[1]); got != 0 {
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
	f := libvirtxtest.New(t, "")
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc != libvirtxtest.ProcDomainGetJobStats {
			return nil, nil, false
		}
		return nil, &libvirt.Error{Code: uint32(libvirt.ErrOperationUnsupported), Message: "statistiques disponibles uniquement sur l'hôte source"}, true
	})
	_, err := dialFake(t, f).JobStats(context.Background(), libvirt.Domain{Name: "vm1"}, false)
	if !IsTargetOnly(err) {
		t.Fatalf("IsTargetOnly(%v) = false", err)
	}
}

// libvirt gives the dirty rate in MiB/s, and the mode as QEMU names it;
// a mode it has no name for is dropped.
func TestDecodeDirtyRate(t *testing.T) {
	p := func(field string, v any) libvirt.TypedParam {
		return libvirt.TypedParam{Field: field, Value: libvirt.TypedParamValue{I: v}}
	}
	r := DecodeDirtyRate([]libvirt.TypedParam{p("dirtyrate.calc_status", int32(2)), p("dirtyrate.calc_period", int32(1)),
		p("dirtyrate.megabytes_per_second", int64(53)), p("dirtyrate.calc_mode", "page-sampling")})
	if !r.Measured || r.Measuring || r.BytesPerSecond != 53<<20 || r.Period != time.Second || r.Mode != DirtyRatePageSampling {
		t.Fatalf("decoded %+v", r)
	}
	r = DecodeDirtyRate([]libvirt.TypedParam{p("dirtyrate.calc_status", int32(1)), p("dirtyrate.calc_mode", "\x1b[31mevil"), p("dirtyrate.calc_period", uint64(1)<<62)})
	if r.Measured || !r.Measuring || r.Mode != "" || r.Period != 60*time.Second {
		t.Fatalf("decoded %+v: want measuring, no mode, the period bounded", r)
	}
}
