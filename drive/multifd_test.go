package drive

import (
	"context"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/migration/policy"
)

// Multifd with post-copy is refused at the request, and after the
// policy, which may be what asks for post-copy.
func TestMultifdWithPostCopyIsRefused(t *testing.T) {
	base := MigrateRequest{Domain: "vm", Target: "10.0.0.2:9475", PostCopy: true}
	for _, r := range []MigrateRequest{
		func() MigrateRequest { r := base; r.Parallel = 2; return r }(),
		func() MigrateRequest { r := base; r.Parallel, r.Compression = 2, "zstd"; return r }(),
		func() MigrateRequest {
			r := base
			r.PostCopy, r.PostCopyAfterSeconds, r.Parallel = false, 5, 1
			return r
		}(),
	} {
		s := &Source{cfg: SourceConfig{AllowAnyTarget: true, Policy: policy.Defaults()}}
		if _, _, err := s.effective(r); err == nil || !strings.Contains(err.Error(), "cannot be had with post-copy") {
			t.Errorf("%+v: %v; want multifd with post-copy refused", r, err)
		}
	}
	if why := multifdWithPostCopy(true, false); why != "" {
		t.Errorf("multifd alone refused: %s", why)
	}
}

// Multifd into a QEMU before 8.0 is refused by the target, naming its
// QEMU; from 8.0 it is taken; without multifd QEMU is not asked.
func TestMultifdIntoAnOldQEMUIsRefused(t *testing.T) {
	f := libvirtxtest.New(t, "")
	ctx := context.Background()
	c, err := libvirtx.Dial(ctx, f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if why, err := multifdInto(ctx, c, true); err != nil || why != "" {
		t.Fatalf("QEMU 10.0: %q, %v; want it taken", why, err)
	}
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcConnectGetVersion {
			return new(libvirtxtest.XDR).U64(7_002_022).Bytes(), nil, true
		}
		return nil, &libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "asked"}, true
	})
	if why, err := multifdInto(ctx, c, true); err != nil || !strings.Contains(why, "QEMU 7.2.22 here tells multifd channels") {
		t.Fatalf("QEMU 7.2: %q, %v; want it refused by name", why, err)
	}
	if why, err := multifdInto(ctx, c, false); err != nil || why != "" {
		t.Fatalf("no multifd: %q, %v", why, err)
	}
}
